"""The Revisions tab: a task's timeline, "fork from here", and diffs between any two revisions."""

from gui.revisions.panel import RevisionsPanel

__all__ = ["RevisionsPanel"]
