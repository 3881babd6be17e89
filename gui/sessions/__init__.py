"""The Sessions & Snapshots tab: sandboxes, snapshots, Stop / Resume / Reconcile."""

from gui.sessions.panel import SessionsPanel

__all__ = ["SessionsPanel"]
