"""Tasks: new tasks from dropped folders, and the continuations and forks that grow lineages.

Owns the order of making a task — import the folder, make the workspace, write the rows — and
undoing all of it when a step fails; continuing a task in its workspace and forking one into a new
workspace from any revision. A task's runs are core.runs'; its revisions core.revisions'.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from core import events as ev
from core import workspaces
from core.context import Context
from core.engines import engine_for
from core.engines.base import MODE_CONTINUE, MODE_FORK
from core.errors import CairnError, Conflict, InputError
from core.ids import new_id
from core.launch import python_command, run_json_command
from core.locks import held
from core.models import Revision, Run, Source, Task, TaskSource, Workspace, WorkspaceState
from core.policy import Policy
from core.revisions import Revisions
from core.runs.service import Runs
from core.sandbox.base import workspace_owner
from core.settings import Settings, default_policy, engine_endpoint, refuse_unreachable
from core.snapshots import Snapshots
from core.vault import Vault, base_ref, collector_paused, revisions_ref
from core.vault.importer import check_importable, import_folder, inside_repository_note
from core.vault.materialize import EarlyCheckout
from core.vault.tree_index import Looked

log = logging.getLogger(__name__)

CHILD_TITLE_MAX = 60
# How long an import of a folder waits for another one of the same folder (several windows or
# commands dropping it at once take turns); CAIRN_IMPORT_WAIT_S overrides it.
IMPORT_WAIT_S = 120.0


def import_wait_s() -> float:
    text = os.environ.get("CAIRN_IMPORT_WAIT_S")
    if not text:
        return IMPORT_WAIT_S
    try:
        return max(0.0, float(text))
    except ValueError:
        raise InputError(f"CAIRN_IMPORT_WAIT_S must be a number of seconds, not {text!r}") from None


@dataclass(frozen=True)
class NewTask:
    task: Task
    workspace: Workspace
    base_revision: str
    note: str | None = None  # what the person should know about the folder (inside a repository)


class Tasks:
    """A data folder's tasks. Thread-safe; long operations block the caller."""

    def __init__(
        self,
        ctx: Context,
        *,
        settings: Settings,
        revisions: Revisions,
        snapshots: Snapshots,
        runs: Runs,
        imports_in_child: bool = False,
    ):
        """`imports_in_child`: `new` imports the folder in a child `cairnctl new` (the desktop
        app: hashing and writing a big folder's files holds the interpreter lock for seconds,
        on whichever thread it runs)."""
        self.ctx = ctx
        self.settings = settings
        self.revisions = revisions
        self.snapshots = snapshots
        self.runs = runs
        self._imports_in_child = imports_in_child

    def get(self, ref: str) -> Task:
        """A task by id or unambiguous id prefix."""
        return self.ctx.task(ref)

    def all(self) -> list[Task]:
        """Every task, oldest first."""
        return self.ctx.store.list_tasks()

    def workspace_of(self, task: Task) -> Workspace:
        return self.ctx.workspace_of(task)

    def set_workspace_state(self, workspace_id: str, state: WorkspaceState) -> Workspace:
        return self.ctx.set_workspace_state(workspace_id, state)

    def new(
        self,
        path: str | Path,
        *,
        title: str | None = None,
        engine: str | None = None,
        instructions: str = "",
        quota_bytes: int | None = None,
        expires_in: float | None = None,
        policy: Policy | None = None,
        host: str | None = None,
    ) -> NewTask:
        """Import a folder into its vault and give a new task a workspace made from it.

        Without `engine` or `policy`, the settings' defaults apply (`defaults.engine`, else the
        shell engine; `defaults.network` and `defaults.allow`, else `allowlist` holding just the
        model's endpoint for an agent engine and no network for the shell engine). A policy under
        which the engine could not reach its model is refused. The task's sandbox runs on `host`
        (a sandbox host's name; default: the settings' default host).
        Bad input is refused before anything is written; a failure later undoes what was made.
        """
        if instructions and not instructions.strip():
            raise InputError(
                "the instructions are blank; give what the task should do, or none at all to "
                "give its commands when it is run (`cairnctl run`)"
            )
        if title:
            title = check_title(title)
        if self._imports_in_child and quota_bytes is None and expires_in is None and policy is None:
            return self._new_in_child(
                Path(path).expanduser().absolute(), title, engine, instructions, host
            )
        defaults = self.settings.defaults() if engine is None or policy is None else {}
        engine = engine or defaults.get("engine") or "shell"
        engine_for(engine)  # an unknown engine is refused before anything is made
        endpoint = engine_endpoint(engine, self.settings.engine(engine))
        policy = policy or default_policy(defaults, endpoint=endpoint)
        refuse_unreachable(engine, policy, endpoint)
        host_name = self.settings.host(host).name
        folder = check_importable(Path(path), self.ctx.data)
        with (
            held(
                self.ctx.data.locks_root,
                "import",
                str(folder),
                f"{folder} is already being imported by another Cairn process",
                wait=import_wait_s(),
            ),
            collector_paused(),
        ):
            return self._new_task_locked(
                folder,
                title or folder.name,
                engine,
                instructions,
                quota_bytes,
                expires_in,
                (policy or Policy()).validate(),
                host_name,
            )

    def _new_in_child(
        self,
        folder: Path,
        title: str | None,
        engine: str | None,
        instructions: str,
        host: str | None,
    ) -> NewTask:
        """`new` by `cairnctl new` in a child process (which checks and refuses as `new` does);
        the task is announced here."""
        argv = python_command("core.cli", "--data-dir", str(self.ctx.data.root), "new", "--json")
        for flag, value in (
            ("--title", title),
            ("--engine", engine),
            ("--host", host),
            ("--instructions", instructions or None),
        ):
            if value is not None:
                argv.append(f"{flag}={value}")  # a value starting with "-" stays a value
        argv.append(str(folder))  # absolute: never taken for an option
        out = run_json_command(argv, f"the import of {folder}")
        task = self.ctx.task(out["task_id"])
        ws = self.ctx.store.get_workspace(out["workspace_id"])
        self.ctx.events.publish(
            ev.TASK_CREATED, task.id, workspace_id=ws.id, source=str(folder.resolve())
        )
        return NewTask(task, ws, out["base_revision"], out["note"])

    def _new_task_locked(
        self,
        folder: Path,
        title: str,
        engine: str,
        instructions: str,
        quota_bytes: int | None,
        expires_in: float | None,
        policy: Policy,
        host: str,
    ) -> NewTask:
        source = self.ctx.store.source_by_path(str(folder))
        new_source = source is None
        if source is None:
            source_id = new_id("source")
            source = Source(
                source_id,
                str(folder),
                "plain",
                str(self.ctx.data.vault_path(source_id)),
                time.time(),
            )
        vault_path = Path(source.vault_path)
        vault_created = not (vault_path / "objects").is_dir()
        vault = Vault.open_or_create(vault_path)
        task_id, ws_id = new_id("task"), new_id("workspace")
        root = self.ctx.data.workspace_path(ws_id)
        owner = workspace_owner(policy.uid)
        early_checkouts: list[EarlyCheckout] = []

        def on_head(head: str, objects: Path) -> None:
            # Git writes the workspace from the user's HEAD while the folder is read: the base
            # is that tree or close to it, and `create_tree` takes the checkout on from there.
            early = workspaces.begin_tree(vault, head, root, owner=owner, objects=objects)
            if early is not None:
                early_checkouts.append(early)

        try:
            result = import_folder(vault, folder, on_head=on_head)
            source.kind = result.kind
            now = time.time()
            ws = Workspace(
                ws_id,
                source.id,
                str(root),
                result.base_commit,
                result.head_commit,
                workspaces.branch_name(title, task_id),
                None,
                WorkspaceState.ALLOCATED.value,
                policy=policy.to_dict(),
                quota_bytes=quota_bytes,
                expires_at=now + expires_in if expires_in else None,
                created_at=now,
                updated_at=now,
            )
            with self.ctx.store.transaction():
                if new_source:
                    self.ctx.store.add_source(source)
                self.ctx.store.add_workspace(ws)
            looked = Looked()
            workspaces.create_tree(
                vault,
                result.base_commit,
                root,
                branch=ws.branch,
                head_commit=result.head_commit,
                label=f"the base of {folder}",
                owner=owner,
                looked=looked,
                # A vault this import made holds only what it has just fetched, copied or
                # stored, each object checked against its id on the way in (unless copied in
                # unread: large packs).
                checked=vault_created and result.objects_checked,
                early=early_checkouts[0] if early_checkouts else None,
                index=result.index,
            )
            vault.objects.update_ref(base_ref(ws_id), result.base_commit)
            vault.objects.update_ref(revisions_ref(ws_id), result.base_commit)
            self.revisions.seed_stat_cache(
                ws_id, root, result.base_commit, result.index, looked=looked
            )
            if owner is not None:
                workspaces.open_to(root, owner)
            task = Task(
                task_id,
                title,
                source.id,
                ws_id,
                engine,
                instructions,
                None,
                TaskSource.NEW.value,
                None,
                now,
                host=host,
            )
            workspaces.check_transition(ws.state, WorkspaceState.PREPARED.value)
            with self.ctx.store.transaction():
                self.ctx.store.add_task(task)
                self.ctx.store.add_revision(
                    Revision(
                        result.base_commit,
                        ws_id,
                        None,
                        result.base_tree,
                        "base",
                        None,
                        result.files,
                        now,
                    )
                )
                self.ctx.store.update_workspace(ws_id, state=WorkspaceState.PREPARED.value)
        except BaseException:
            for early in early_checkouts:
                early.close()
            self._undo_new_task(
                vault, ws_id, task_id, root, source if new_source else None, vault_created
            )
            raise
        self.ctx.remember_vault(source.id, vault)
        ws = self.ctx.store.get_workspace(ws_id)
        self.ctx.events.publish(ev.TASK_CREATED, task_id, workspace_id=ws_id, source=str(folder))
        return NewTask(task, ws, result.base_commit, inside_repository_note(folder))

    def _undo_new_task(
        self,
        vault: Vault,
        ws_id: str,
        task_id: str,
        root: Path,
        new_source: Source | None,
        vault_created: bool,
    ) -> None:
        workspaces.remove_tree(root)
        for ref in (base_ref(ws_id), revisions_ref(ws_id)):
            try:
                if vault.objects.read_ref(ref):
                    vault.objects.delete_ref(ref)
            except CairnError:
                pass
        try:
            with self.ctx.store.transaction():
                self.ctx.store.delete_task(task_id)
                self.ctx.store.delete_workspace_rows(ws_id)
                if new_source is not None:
                    self.ctx.store.delete_source(new_source.id)
        except Exception:  # pragma: no cover - the original error matters more
            log.exception("could not undo the rows of a failed import")
        if vault_created:
            vault.close()
            shutil.rmtree(vault.git_dir, ignore_errors=True)

    # -- changing a task ------------------------------------------------------------------------

    def rename(self, task_ref: str, title: str) -> Task:
        """Give the task a new title (one line, not blank). Its branch keeps its name: it may
        have been promoted already."""
        task = self.ctx.task(task_ref)
        title = check_title(title)
        if title != task.title:
            self.ctx.store.update_task(task.id, title=title)
            self.ctx.events.publish(ev.TASK_CHANGED, task.id, task_id=task.id, title=title)
        return self.ctx.task(task.id)

    def edit_instructions(self, task_ref: str, instructions: str) -> Task:
        """Replace the task's instructions; only before its first run (after it, they are what
        the run did: continue or fork the task to give it more work)."""
        task = self.ctx.task(task_ref)
        refusal = self.edit_refusal(task)
        if refusal:
            raise Conflict(refusal)
        text = instructions.strip("\n")
        if not text.strip():
            raise InputError(
                "the instructions are blank; say what the task should do"
                + (" (shell: one command per line)" if task.engine == "shell" else "")
            )
        if text != task.instructions:
            self.ctx.store.update_task(task.id, instructions=text)
            self.ctx.events.publish(ev.TASK_CHANGED, task.id, task_id=task.id, instructions=True)
        return self.ctx.task(task.id)

    def edit_refusal(self, task: Task | str) -> str | None:
        """Why the task's instructions cannot be edited now, or None."""
        task = task if isinstance(task, Task) else self.ctx.task(task)
        run = self.runs.latest(task)
        if run is not None:
            return (
                f"task {task.id} has run already (run {run.id}); its instructions are what that "
                "run did — continue or fork it to give it more work"
            )
        return None

    # -- revisions -----------------------------------------------------------------------------

    def policy_of(self, ws: Workspace) -> Policy:
        return Policy.from_dict(ws.policy)

    def set_policy(self, task_ref: str, **changes: object) -> Policy:
        """A new version of the task's sandbox policy; it applies from the next start or resume."""
        ws = self.ctx.workspace_of(self.ctx.task(task_ref))
        policy = self.policy_of(ws).changed(**changes)
        self.ctx.store.update_workspace(ws.id, policy=policy.to_dict())
        self.ctx.events.publish(ev.POLICY_CHANGED, ws.id, version=policy.version)
        return policy

    # -- runs ------------------------------------------------------------------------------------

    def continue_from(
        self, task_ref: str, message: str, *, title: str | None = None
    ) -> tuple[Task, Run]:
        """A child task that keeps working in the parent's workspace, resuming the engine's own
        session natively (or, when that is impossible, a new session that says why)."""
        parent = self.ctx.task(task_ref)
        self.runs.refuse_in_flight(parent)
        self.runs.preflight(parent)  # a child that could not run is never made
        last = self.runs.latest(parent)
        child = self._child_task(
            parent,
            TaskSource.CONTINUE,
            parent.workspace_id,
            None,
            title or child_title(message, f"{parent.title} (continued)"),
            message,
            host=parent.host,  # the same workspace, so the same sandbox
        )
        try:
            run = self.runs.start(
                child.id,
                prompt=message,
                mode=MODE_CONTINUE,
                session_id=last.engine_session_id if last else None,
            )
        except CairnError:
            self.ctx.events.publish(ev.TASK_CREATED, child.id, parent=parent.id, source="continue")
            raise
        self.ctx.events.publish(ev.TASK_CREATED, child.id, parent=parent.id, source="continue")
        return self.ctx.task(child.id), run

    def fork(
        self,
        task_ref: str,
        message: str,
        *,
        at_revision: str | None = None,
        title: str | None = None,
        host: str | None = None,
    ) -> tuple[Task, Run]:
        """A child task with its own workspace made from any revision of the parent (default the
        latest), its own sandbox (on `host`; default: the settings' default host), a copy of the
        parent's engine home and a forked engine session. The parent's workspace is never
        touched."""
        parent = self.ctx.task(task_ref)
        host_name = self.settings.host(host).name
        self.runs.refuse_in_flight(parent)
        self.runs.preflight(parent)  # a child that could not run is never made
        rev = self.revisions.resolve(parent, at_revision, default="latest")
        old = self.ctx.workspace_of(parent)
        child_id = new_id("task")
        ws = self.snapshots.workspace_from_revision(
            old,
            rev.id,
            rev.tree,
            branch=workspaces.branch_name(title or f"{parent.title} fork", child_id),
            trigger="base",
            label=f"revision {rev.id[:12]} of task {parent.id}",
        )
        ws_id = ws.id
        child = self._child_task(
            parent,
            TaskSource.FORK,
            ws_id,
            rev.id,
            title or child_title(message, f"{parent.title} (fork)"),
            message,
            task_id=child_id,
            host=host_name,
        )
        self.ctx.events.publish(
            ev.TASK_CREATED, child.id, parent=parent.id, source="fork", from_revision=rev.id
        )
        last = self.runs.latest(parent)
        parent_session = self.ctx.store.session_for(old.id)
        run = self.runs.start(
            child.id,
            prompt=message,
            mode=MODE_FORK,
            session_id=last.engine_session_id if last else None,
            home_seed=self.ctx.data.home_path(parent_session.id) if parent_session else None,
        )
        return self.ctx.task(child.id), run

    def _child_task(
        self,
        parent: Task,
        source: TaskSource,
        workspace_id: str | None,
        from_revision: str | None,
        title: str,
        message: str,
        *,
        task_id: str | None = None,
        host: str | None = None,
    ) -> Task:
        child = Task(
            task_id or new_id("task"),
            title,
            parent.source_id,
            workspace_id,
            parent.engine,
            message,
            parent.id,
            source.value,
            from_revision,
            time.time(),
            host=host,
        )
        self.ctx.store.add_task(child)
        return child


TITLE_MAX = 200


def check_title(title: str) -> str:
    """A task title as stored: one line, inner whitespace as typed, not blank, not too long."""
    text = " ".join(title.split())
    if not text:
        raise InputError("a task's title cannot be blank")
    if len(text) > TITLE_MAX:
        raise InputError(
            f"a task's title is at most {TITLE_MAX} characters (this one has {len(text)})"
        )
    return text


def child_title(message: str, fallback: str) -> str:
    """A continuation's or fork's default title: the first line of what it was asked to do
    (shortened), so a lineage reads as the steps taken; `fallback` when the message is empty."""
    line = next((" ".join(t.split()) for t in message.splitlines() if t.strip()), "")
    if not line:
        return fallback
    if len(line) <= CHILD_TITLE_MAX:
        return line
    # Cut at the last word that fits, never inside one (a long first word is cut, as it must).
    cut = line[: CHILD_TITLE_MAX - 1]
    words = cut.rsplit(" ", 1)[0] if " " in cut and line[CHILD_TITLE_MAX - 1] != " " else cut
    return words.rstrip(" ,;:&|") + "…"
