"""Where the app's bundled resources (icons, style sheet, sandbox recipes) are on disk.

Owns path lookup only; loading a file into a Qt object is the caller's job.
"""

from __future__ import annotations

import sys
from pathlib import Path

APP_ICON_NAME = "cairn"


def resources_root() -> Path:
    """The `resources/` folder: inside the PyInstaller bundle when frozen, else next to gui/."""
    bundle = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def resource_path(*parts: str) -> Path:
    return resources_root().joinpath(*parts)


def icon_path(name: str = APP_ICON_NAME) -> Path:
    return resource_path("icons", f"{name}.svg")


ICON_NAMES = ("approve", "continue", "deny", "export", "folder", "fork", "promote", "resume",
              "start", "stop", "task", "warning")
