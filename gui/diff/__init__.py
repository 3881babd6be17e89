"""The diff viewer: changed files, and one file's changes unified or side by side."""

from gui.diff.viewer import DiffViewer, FileAction

__all__ = ["DiffViewer", "FileAction"]
