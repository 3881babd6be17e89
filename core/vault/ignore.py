"""Which paths of a folder are left out of revisions: `.git` folders and the folder's own
`.gitignore` rules, read the way git reads them (deeper files and later lines win).

Owns the matching; callers decide when rules changed (an edited `.gitignore`) and call `reset`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pathspec

ALWAYS_IGNORED = ".git"


class IgnoreRules:
    """`.gitignore` rules below one root folder. Paths are '/'-separated and relative to it."""

    def __init__(self, root: Path | str, *, extra_patterns: list[str] | None = None):
        self.root = os.fspath(root)
        self._specs: dict[str, pathspec.GitIgnoreSpec | None] = {}
        self._dir_ignored: dict[str, bool] = {}
        self._chains: dict[str, tuple[tuple[str, pathspec.GitIgnoreSpec], ...]] = {}
        self._extra = pathspec.GitIgnoreSpec.from_lines(extra_patterns) if extra_patterns else None

    def reset(self) -> None:
        """Forget what was read (a `.gitignore` changed)."""
        self._specs.clear()
        self._dir_ignored.clear()
        self._chains.clear()

    def _spec(self, folder: str) -> pathspec.GitIgnoreSpec | None:
        if folder in self._specs:
            return self._specs[folder]
        path = (
            os.path.join(self.root, folder, ".gitignore")
            if folder
            else os.path.join(self.root, ".gitignore")
        )
        spec = None
        try:
            with open(path, "rb") as f:
                lines = f.read().decode("utf-8", "surrogateescape").splitlines()
            spec = pathspec.GitIgnoreSpec.from_lines(lines) if lines else None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            spec = None
        self._specs[folder] = spec
        return spec

    def _applying(self, folder: str) -> tuple[tuple[str, pathspec.GitIgnoreSpec], ...]:
        """The `.gitignore` files whose rules reach inside `folder`, deepest first (kept per
        folder: a folder's files all ask the same)."""
        chain = self._chains.get(folder)
        if chain is not None:
            return chain
        parts = folder.split("/") if folder else []
        chain = ()
        for depth in range(len(parts) + 1):
            here = "/".join(parts[:depth])
            known = self._chains.get(here)
            if known is None:
                spec = self._spec(here)
                known = self._chains[here] = ((here, spec), *chain) if spec else chain
            chain = known
        return chain

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether the path itself is ignored, assuming its parent folder is not."""
        folder, _, name = rel.rpartition("/")
        if name == ALWAYS_IGNORED:
            return True
        chain = self._applying(folder)
        if not chain and self._extra is None:
            return False
        probe = rel + "/" if is_dir else rel
        # From the deepest .gitignore up: the first file with an opinion decides.
        for here, spec in chain:
            result = spec.check_file(probe[len(here) + 1 :] if here else probe)
            if result.include is not None:
                return bool(result.include)
        if self._extra is not None:
            result = self._extra.check_file(probe)
            if result.include is not None:
                return bool(result.include)
        return False

    def is_ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether the path is ignored, itself or through any folder above it."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            cached = self._dir_ignored.get(folder)
            if cached is None:
                cached = self.matches(folder, True)
                self._dir_ignored[folder] = cached
            if cached:
                return True
        return self.matches(rel, is_dir)
