"""Sorting dropped or chosen paths into folders a task can start from and everything else.

Owns the checks and the words that explain a refusal; no Qt. It reads the disk (a stat and a
directory listing per path), so the GUI calls it inside a job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SortedPaths:
    folders: list[Path] = field(default_factory=list)
    refused: list[tuple[Path, str]] = field(default_factory=list)  # (path, why)

    def message(self) -> str:
        """One status line for the refused paths ('' when nothing was refused)."""
        if not self.refused:
            return ""
        parts = [f"{path.name or path}: {why}" for path, why in self.refused]
        prefix = "Cannot start a task from " + ("this" if len(parts) == 1 else "these")
        return f"{prefix}: {'; '.join(parts)}. Drop a repository folder to start a task."


def check_folder(path: Path) -> str | None:
    """Why a task cannot start from `path`, or None when it is a readable folder."""
    try:
        if not path.exists():
            return "it does not exist"
        if not path.is_dir():
            return "it is a file, not a folder"
        with os.scandir(path) as entries:
            next(entries, None)
    except PermissionError:
        return "the folder cannot be read (permission denied)"
    except OSError as exc:
        return f"the folder cannot be read ({exc.strerror or exc})"
    return None


def sort_paths(paths: list[Path]) -> SortedPaths:
    result = SortedPaths()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw).expanduser()
        path = path.absolute()
        if path in seen:
            continue
        seen.add(path)
        why = check_folder(path)
        if why is None:
            result.folders.append(path)
        else:
            result.refused.append((path, why))
    return result
