"""The vault: one bare git repository per source folder, outside every sandbox, holding the
base of each import, every revision of every workspace, and the snapshot refs.

Owns the vault's layout (refs, attributes, config) and revision commits; importing, scanning and
materializing live in the modules beside this one. The store keeps the rows that index it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import VaultError
from core.vault.objects import Commit, ObjectStore, run_git

# Switch off every conversion between files and blobs: the vault records bytes as they are.
_INFO_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"
_CONFIG = {
    "gc.auto": "0",  # never repack or prune behind our back
    "core.logAllRefUpdates": "false",
    "core.autocrlf": "false",
    "receive.denyDeletes": "true",
}


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for a pass over a whole tree: such a pass makes
    hundreds of thousands of objects that hold no cycle, and every collection of the oldest
    generation walks all of them again (over a second of a 100,000-file import). Whatever
    cycles were made are collected once it ends."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def revisions_ref(workspace_id: str) -> str:
    return f"refs/cairn/workspaces/{workspace_id}/revisions"


def snapshot_ref(snapshot_id: str) -> str:
    return f"refs/cairn/snapshots/{snapshot_id}"


def base_ref(workspace_id: str) -> str:
    return f"refs/cairn/workspaces/{workspace_id}/base"


@dataclass(frozen=True)
class RevisionInfo:
    """What a revision commit says about itself (its trailers)."""

    commit: Commit
    trigger: str
    run_id: str | None
    files_changed: int

    @classmethod
    def parse(cls, commit: Commit) -> RevisionInfo:
        run = commit.trailer("Cairn-Run")
        return cls(
            commit,
            commit.trailer("Cairn-Trigger") or "base",
            None if run in (None, "", "-") else run,
            int(commit.trailer("Cairn-Files-Changed") or 0),
        )


class Vault:
    """One source folder's bare repository."""

    def __init__(self, git_dir: Path):
        self.git_dir = Path(git_dir)
        if not (self.git_dir / "objects").is_dir():
            raise VaultError(f"no vault at {self.git_dir}")
        self.objects = ObjectStore(self.git_dir)

    @classmethod
    def open_or_create(cls, git_dir: Path) -> Vault:
        git_dir = Path(git_dir)
        if not (git_dir / "objects").is_dir():
            git_dir.parent.mkdir(parents=True, exist_ok=True)
            tmp = git_dir.with_name(git_dir.name + f".tmp-{os.getpid()}")
            run_git(["init", "--quiet", "--bare", str(tmp)])
            for key, value in _CONFIG.items():
                run_git(["--git-dir", str(tmp), "config", key, value])
            (tmp / "info").mkdir(exist_ok=True)
            (tmp / "info" / "attributes").write_text(_INFO_ATTRIBUTES)
            for hook in (tmp / "hooks").glob("*"):
                hook.unlink()
            try:
                os.rename(tmp, git_dir)
            except OSError:
                # Someone else created it first; theirs is as good as ours.
                run_git(["--git-dir", str(tmp), "--version"], check=False)
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
        return cls(git_dir)

    def close(self) -> None:
        self.objects.close()

    # -- revisions -----------------------------------------------------------------------------

    def commit_revision(
        self,
        workspace_id: str,
        tree: str,
        parent: str | None,
        *,
        trigger: str,
        run_id: str | None = None,
        files_changed: int = 0,
        timestamp: float | None = None,
    ) -> str:
        """Write a revision commit on the workspace's revision ref (which must still be
        `parent`)."""
        message = (
            f"Cairn revision ({trigger})\n\n"
            f"Cairn-Workspace: {workspace_id}\n"
            f"Cairn-Trigger: {trigger}\n"
            f"Cairn-Run: {run_id or '-'}\n"
            f"Cairn-Files-Changed: {files_changed}\n"
        )
        sha = self.objects.write_commit(
            tree,
            [parent] if parent else [],
            message,
            timestamp=timestamp if timestamp is not None else time.time(),
        )
        self.objects.update_ref(revisions_ref(workspace_id), sha, old=parent)
        return sha

    def revision_head(self, workspace_id: str) -> str | None:
        return self.objects.read_ref(revisions_ref(workspace_id))

    def revision_chain(
        self, workspace_id: str, stop_at: set[str] | None = None
    ) -> list[RevisionInfo]:
        """The workspace's revisions, oldest first (walking parents until `stop_at` or the root)."""
        out = []
        sha = self.revision_head(workspace_id)
        stop_at = stop_at or set()
        while sha and sha not in stop_at:
            info = RevisionInfo.parse(self.objects.read_commit(sha))
            out.append(info)
            if info.trigger == "base":
                break
            sha = info.commit.parents[0] if info.commit.parents else None
        out.reverse()
        return out

    def tree_of(self, commit: str) -> str:
        return self.objects.read_commit(commit).tree
