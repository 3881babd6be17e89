"""Workspaces: the tree a task works in, its own `.git`, and its lifecycle.

Owns creating a workspace tree from a vault revision, the lifecycle transition table, quota and
expiry checks. Recording revisions is the recorder's job; rows are the store's.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from core import humanize
from core.errors import CairnError, IllegalTransition, QuotaExceeded
from core.models import Workspace
from core.models import WorkspaceState as S
from core.vault import Vault
from core.vault.materialize import materialize
from core.vault.objects import git_env, run_git

# Allowed lifecycle moves. ACTIVE means a sandbox is up; FROZEN accepts no new runs (its files
# are kept as they are); ARCHIVED has no tree on disk but stays restorable from its snapshots.
TRANSITIONS: dict[S, frozenset[S]] = {
    S.ALLOCATED: frozenset({S.PREPARED, S.DESTROYED}),
    S.PREPARED: frozenset({S.ACTIVE, S.FROZEN, S.ARCHIVED, S.DESTROYED}),
    S.ACTIVE: frozenset({S.PREPARED, S.FROZEN, S.DESTROYED}),
    S.FROZEN: frozenset({S.PREPARED, S.ARCHIVED, S.DESTROYED}),
    S.ARCHIVED: frozenset({S.PREPARED, S.DESTROYED}),
    S.DESTROYED: frozenset(),
}

# States whose tree is on disk and may change.
LIVE_STATES = (S.PREPARED.value, S.ACTIVE.value)


def check_transition(current: str, target: str) -> None:
    cur, tgt = S(current), S(target)
    if tgt not in TRANSITIONS[cur]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[cur])) or "nothing"
        raise IllegalTransition(
            f"a workspace cannot go from {cur.value} to {tgt.value} (from {cur.value}: {allowed})"
        )


def branch_name(title: str, task_id: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].strip("-") or "task"
    return f"cairn/{slug}-{task_id.split('_', 1)[-1][-6:]}"


def create_tree(
    vault: Vault, revision: str, root: Path, *, branch: str, head_commit: str | None, label: str
) -> str:
    """Materialize `revision` at `root` and give it a `.git` of its own on `branch`.

    The `.git` shares the vault's objects by hard links (a copy only across filesystems), sits on
    `branch` at the user's HEAD (or at the base for a folder without history) and has an index
    of that commit, so `git status` inside shows the same uncommitted work the user had.
    Returns the tree id. On failure nothing is left at `root`.
    """
    tree = materialize(vault, revision, root, label=label)
    try:
        _init_git(vault, root, branch=branch, commit=head_commit or revision)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return tree


def _init_git(vault: Vault, root: Path, *, branch: str, commit: str) -> None:
    git_dir = root / ".git"
    run_git(["init", "--quiet", "--initial-branch", branch, str(root)])
    for hook in (git_dir / "hooks").glob("*"):
        hook.unlink()
    _link_objects(vault.objects.objects_dir, git_dir / "objects")
    env = git_env(GIT_DIR=str(git_dir), GIT_WORK_TREE=str(root))
    run_git(["update-ref", f"refs/heads/{branch}", commit], env=env)
    run_git(["config", "user.name", "Cairn"], env=env)
    run_git(["config", "user.email", "cairn@localhost"], env=env)
    run_git(["read-tree", commit], env=env)
    run_git(["update-index", "-q", "--refresh"], env=env, check=False)


def _link_objects(src: Path, dst: Path) -> None:
    """Share the vault's objects with a workspace: hard links, or copies across filesystems."""
    for dirpath, _, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel == "info" or rel.startswith("info" + os.sep):
            continue
        target = dst / rel if rel != "." else dst
        target.mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name.startswith("tmp_") or name.endswith(".lock"):
                continue
            s, d = os.path.join(dirpath, name), target / name
            if d.exists():
                continue
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)


def remove_tree(root: Path) -> None:
    """Delete a workspace tree, including files an agent made read-only."""

    def _onerror(
        func: Callable[[str], object], path: str, _exc: object
    ) -> None:  # pragma: no cover - depends on odd permissions
        with contextlib.suppress(OSError):
            os.chmod(path, 0o700)
            func(path)

    if root.exists():
        shutil.rmtree(root, onerror=_onerror)


def tree_size(root: Path) -> int:
    """Bytes used by the files under `root` (links and folders count as zero)."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def check_quota(ws: Workspace, *, size: int | None = None) -> int:
    """Raise QuotaExceeded when the workspace uses more disk than its quota; returns the size."""
    used = tree_size(Path(ws.root)) if size is None else size
    if ws.quota_bytes is not None and used > ws.quota_bytes:
        raise QuotaExceeded(
            f"workspace {ws.id} uses {humanize.size(used)}, over its quota of "
            f"{humanize.size(ws.quota_bytes)}"
        )
    return used


def is_expired(ws: Workspace, now: float | None = None) -> bool:
    return ws.expires_at is not None and (now or time.time()) >= ws.expires_at


def require_tree(ws: Workspace) -> Path:
    """The workspace's root, or a clear error when it is not on disk."""
    root = Path(ws.root)
    if ws.state not in LIVE_STATES and ws.state != S.FROZEN.value:
        raise CairnError(f"workspace {ws.id} is {ws.state}; its files are not on disk")
    if not root.is_dir():
        raise CairnError(
            f"the workspace folder {root} is missing (deleted outside Cairn); "
            "restore it from a snapshot"
        )
    return root
