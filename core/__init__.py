"""Cairn's domain: workspaces, revisions, snapshots, sandboxes, runs and lineage.

Pure Python; never imports Qt. The GUI and `cairnctl` reach it through `core.app.Cairn`.
"""

__version__ = "0.1.0"
