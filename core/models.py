"""The records Cairn keeps about its objects (their vocabulary: docs/architecture.md).

Plain dataclasses with no behaviour beyond small derived properties; the store persists them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class WorkspaceState(str, enum.Enum):
    ALLOCATED = "allocated"
    PREPARED = "prepared"
    ACTIVE = "active"
    FROZEN = "frozen"
    ARCHIVED = "archived"
    DESTROYED = "destroyed"


class TaskSource(str, enum.Enum):
    NEW = "new"
    CONTINUE = "continue"
    FORK = "fork"


class RevisionTrigger(str, enum.Enum):
    BASE = "base"
    WATCH = "watch"
    CHECKPOINT = "checkpoint"
    EXTERNAL = "external"
    RESTORE = "restore"
    MANUAL = "manual"


class RunState(str, enum.Enum):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def in_flight(self) -> bool:
        return self in (
            RunState.QUEUED,
            RunState.PREPARING,
            RunState.RUNNING,
            RunState.WAITING_APPROVAL,
        )


@dataclass
class Source:
    id: str
    path: str
    kind: str  # "git" or "plain"
    vault_path: str
    created_at: float


@dataclass
class Task:
    id: str
    title: str
    source_id: str
    workspace_id: str | None
    engine: str
    instructions: str
    parent_task_id: str | None
    source: str  # TaskSource value
    from_revision: str | None
    created_at: float
    host: str | None = None  # the sandbox host its sandbox runs on (None: made before hosts)


@dataclass
class Workspace:
    id: str
    source_id: str
    root: str
    base_revision: str
    head_commit: str | None  # the user's HEAD at import (None for a plain folder)
    branch: str
    current_revision: str | None
    state: str  # WorkspaceState value
    policy: dict = field(default_factory=dict)
    mounts: list = field(default_factory=list)
    quota_bytes: int | None = None
    expires_at: float | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


@dataclass
class Revision:
    id: str  # the vault commit id
    workspace_id: str
    parent_id: str | None
    tree: str
    trigger: str  # RevisionTrigger value
    run_id: str | None
    files_changed: int
    created_at: float
    seq: int = 0


@dataclass
class Snapshot:
    id: str
    workspace_id: str
    revision_id: str
    tree: str
    state: str  # "durable" once the ref and objects are synced
    image_digest: str | None = None
    setup_command: str | None = None
    engine_home_archive: str | None = None
    created_at: float = 0.0
    name: str | None = None  # a person's name for it; the id stays the reference


@dataclass
class Run:
    id: str
    task_id: str
    state: str  # RunState value
    state_version: int
    engine: str
    spec: dict = field(default_factory=dict)
    engine_session_id: str | None = None
    exit_code: int | None = None
    note: str | None = None
    output_offset: int = 0
    stderr_offset: int = 0
    attempt: int = 0
    workspace_id: str | None = None
    resume_report: dict | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def exec_id(self) -> str:
        """The name of the current attempt's folder under the session's runs folder."""
        return f"{self.id}.{self.attempt}"


@dataclass
class Checkpoint:
    id: str
    run_id: str
    run_state_version: int
    workspace_ref: str  # git:<ref>@<sha>
    tree: str
    snapshot_id: str
    pending_step: str | None
    engine_session_id: str | None
    tool_contract: dict
    policy_version: int
    created_at: float


@dataclass
class SessionRecord:
    """A sandbox session's persisted state (DESIGN: "Sandbox session state"): no secrets."""

    id: str
    workspace_id: str
    backend: str
    container_id: str | None
    container_name: str | None
    image_digest: str | None
    mounts: list = field(default_factory=list)
    generation: int = 0
    snapshot_id: str | None = None
    status: str = "live"  # live | stopped | gone
    policy_version: int | None = None
    launch_specs: list = field(default_factory=list)
    policy: dict = field(default_factory=dict)  # the policy the sandbox was made under
    created_at: float = 0.0
    updated_at: float = 0.0
    host: str | None = None  # the sandbox host it runs on (None: made before hosts)
