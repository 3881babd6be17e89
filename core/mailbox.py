"""The approval mailbox on disk: where the judge's decisions live and how a sandbox sees them.

Owns the decisions folder's place and permissions, shared by the sandbox set-up (which mounts it
read-only) and the judge (which writes into it); the requests, rules and rows are core.approvals'.
"""

from __future__ import annotations

import os
from pathlib import Path

DECISIONS_IN_SANDBOX = "/cairn/decisions"


def decisions_root(data_root: Path, workspace_id: str) -> Path:
    """The host folder the workspace's sandbox sees read-only at /cairn/decisions."""
    return Path(data_root) / "approvals" / workspace_id


def decision_path(data_root: Path, workspace_id: str, exec_id: str, request_id: str) -> Path:
    return decisions_root(data_root, workspace_id) / exec_id / f"{request_id}.json"


def ensure_decisions_root(data_root: Path, workspace_id: str) -> Path:
    """Made before the sandbox (a bind mount needs its source); readable by the sandbox user."""
    root = decisions_root(data_root, workspace_id)
    root.mkdir(parents=True, exist_ok=True)
    for folder in (root.parent, root):
        os.chmod(folder, 0o755)
    return root
