"""Where Cairn keeps its data on disk, and the layout inside that folder.

Owns path arithmetic only; the store, vault and workspaces own what goes in each place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

ENV_VAR = "CAIRN_DATA_DIR"


def default_data_dir() -> Path:
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("cairn", appauthor=False))


@dataclass(frozen=True)
class DataDir:
    """The layout of one Cairn data folder (docs/architecture.md, "Data folder")."""

    root: Path

    @classmethod
    def resolve(cls, path: str | os.PathLike[str] | None = None) -> DataDir:
        root = Path(path).expanduser() if path else default_data_dir()
        return cls(root.resolve())

    @property
    def db_path(self) -> Path:
        return self.root / "cairn.db"

    @property
    def vault_root(self) -> Path:
        return self.root / "vault"

    @property
    def workspaces_root(self) -> Path:
        return self.root / "workspaces"

    @property
    def homes_root(self) -> Path:
        return self.root / "homes"

    @property
    def runs_root(self) -> Path:
        return self.root / "runs"

    @property
    def artifacts_root(self) -> Path:
        return self.root / "artifacts"

    @property
    def cache_root(self) -> Path:
        """Rebuildable data (stat caches); deleting it loses nothing."""
        return self.root / "cache"

    @property
    def locks_root(self) -> Path:
        return self.root / "locks"

    def vault_path(self, source_id: str) -> Path:
        return self.vault_root / f"{source_id}.git"

    def workspace_path(self, workspace_id: str) -> Path:
        return self.workspaces_root / workspace_id

    def home_path(self, session_id: str) -> Path:
        return self.homes_root / session_id

    def ensure(self) -> DataDir:
        for p in (
            self.root,
            self.vault_root,
            self.workspaces_root,
            self.homes_root,
            self.runs_root,
            self.artifacts_root,
            self.cache_root,
            self.locks_root,
        ):
            p.mkdir(parents=True, exist_ok=True)
        return self

    def contains(self, path: Path) -> bool:
        """True when `path` is the data folder, inside it, or contains it."""
        path = path.resolve()
        return path == self.root or self.root in path.parents or path in self.root.parents
