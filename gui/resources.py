"""Where the app's bundled resources (icons, style sheet, sandbox recipes) are on disk.

Owns the GUI's names for them; the folder itself (checkout or frozen bundle) comes from core.launch,
and loading a file into a Qt object is the caller's job.
"""

from __future__ import annotations

from pathlib import Path

from core.launch import resource_path

APP_ICON_NAME = "cairn"


def icon_path(name: str = APP_ICON_NAME) -> Path:
    return resource_path("icons", f"{name}.svg")


ICON_NAMES = (
    "approve",
    "continue",
    "deny",
    "error",
    "export",
    "folder",
    "fork",
    "ok",
    "promote",
    "resume",
    "start",
    "stop",
    "task",
    "warning",
)
