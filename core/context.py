"""What every service takes: the data folder, the store, the event stream and the vaults.

Owns opening and closing those shared pieces, the plain look-ups every layer needs (a task by
reference, its workspace, a source folder's vault) and a workspace's lifecycle moves. What is
done with them belongs to the services built on top (core.revisions, core.snapshots, core.runs,
core.tasks, …).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from core import events as ev
from core import workspaces
from core.datadir import DataDir
from core.errors import CairnError, VaultError
from core.models import Task, Workspace, WorkspaceState
from core.store import Store
from core.vault import Vault

T = TypeVar("T")


class Context:
    """The shared pieces of one open data folder. Thread-safe."""

    def __init__(self, data: DataDir):
        self.data = data
        try:
            data.ensure()
        except OSError as exc:
            raise CairnError(f"cannot use the data folder {data.root}: {exc.strerror}") from exc
        self.store = Store(data.db_path)
        self.events = ev.EventBus(self.store.append_event)
        self._vaults: dict[str, Vault] = {}
        self._lock = threading.RLock()

    @classmethod
    def open(cls, data_dir: str | Path | None = None) -> Context:
        return cls(DataDir.resolve(data_dir))

    def close(self) -> None:
        with self._lock:
            for vault in self._vaults.values():
                vault.close()
            self._vaults.clear()
        self.store.close()

    # -- look-ups ------------------------------------------------------------------------------

    def vault_for(self, source_id: str) -> Vault:
        """The vault of a source folder, opened once per process."""
        with self._lock:
            vault = self._vaults.get(source_id)
            if vault is None:
                source = self.store.get_source(source_id)
                try:
                    vault = Vault(Path(source.vault_path))
                except VaultError as exc:
                    raise CairnError(
                        f"the vault of {source.path} is missing ({source.vault_path})"
                    ) from exc
                self._vaults[source_id] = vault
            return vault

    def remember_vault(self, source_id: str, vault: Vault) -> None:
        """Keep a vault this process has just opened (or made) for later look-ups."""
        with self._lock:
            self._vaults.setdefault(source_id, vault)

    def task(self, ref: str) -> Task:
        """A task by id or unambiguous id prefix."""
        return self.store.find_task(ref)

    def workspace_of(self, task: Task) -> Workspace:
        if not task.workspace_id:
            raise CairnError(f"task {task.id} has no workspace")
        return self.store.get_workspace(task.workspace_id)

    def set_workspace_state(self, workspace_id: str, state: WorkspaceState) -> Workspace:
        """Move a workspace along its lifecycle (refusing an illegal move) and say so."""
        ws = self.store.get_workspace(workspace_id)
        workspaces.check_transition(ws.state, state.value)
        self.store.update_workspace(workspace_id, state=state.value)
        self.events.publish(ev.WORKSPACE_STATE, workspace_id, state=state.value, previous=ws.state)
        return self.store.get_workspace(workspace_id)

    def task_of_workspace(self, workspace_id: str) -> Task | None:
        """The oldest task working in a workspace (a continuation shares its parent's)."""
        return next((t for t in self.store.list_tasks() if t.workspace_id == workspace_id), None)


class Lazy(Generic[T]):
    """A service made on first use (so a command that needs no Docker or keyring never touches
    them) and forgotten on `reset`, so the next use makes it again from the current settings."""

    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value

    def reset(self) -> None:
        with self._lock:
            self._value = None
