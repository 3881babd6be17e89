"""What the Settings and Credentials pages read and write through the facade, as plain values
(no Qt); the functions here run inside jobs, never on the GUI thread.

Owns the settings as the dialog shows them, the changes between the form and what was read
(checked all first, then written, so a refusal writes nothing), and a task's grants as rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from core import signin
from core.app import Cairn
from core.credentials import Grant
from core.engines import ENGINES
from core.engines.base import CredentialKind
from core.errors import CairnError
from core.signin import EngineStatus
from gui.dialogs.data import engine_choices
from gui.errors import describe_error

# -- settings ------------------------------------------------------------------------------------


@dataclass
class LoadedSettings:
    """What the dialog read when it opened (or after its last write), as plain values."""

    defaults: dict[str, str] = field(default_factory=dict)
    engines: dict[str, dict[str, str]] = field(default_factory=dict)
    engine_keys: list[str] = field(default_factory=list)
    engines_offered: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    rules: dict[str, Any] = field(default_factory=dict)
    hosts: list[tuple[str, str]] = field(default_factory=list)  # (name, "<engine> <address>")


def load_settings(cairn: Cairn) -> LoadedSettings:
    """Everything the dialog shows, read through the facade (on a job's thread)."""
    keys = cairn.settings.keys()
    engines = list(keys["engines"])
    return LoadedSettings(
        defaults=dict(cairn.settings.get("defaults") or {}),
        engines={e: dict(cairn.settings.get(f"engines.{e}") or {}) for e in engines},
        engine_keys=list(keys["engine_keys"]),
        engines_offered=list(engine_choices(engines)),
        networks=list(keys["networks"]),
        backends=list(keys["backends"]),
        rules=cairn.approvals.risk_rules(),
        hosts=[(h.name, h.value) for h in cairn.hosts.list()],
    )


@dataclass(frozen=True)
class Changes:
    """The keys to set (key → value) and to unset, and the rules text to save (None: keep)."""

    set: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    rules_text: str | None = None

    def __bool__(self) -> bool:
        return bool(self.set or self.unset or self.rules_text is not None)


def apply_changes(cairn: Cairn, changes: Changes) -> LoadedSettings:
    """Check every change first and write nothing if one is refused (all refusals in one
    message, one line each); then write them. A write that fails part-way says what was saved
    and what was not. Returns the settings as they are now (on a job's thread)."""
    problems = []
    for key, value in changes.set.items():
        try:
            cairn.settings.check(key, value)
        except CairnError as exc:
            problems.append(f"{key}: {exc}")
    if changes.rules_text is not None:
        try:
            cairn.approvals.check_risk_rules(changes.rules_text)
        except CairnError as exc:
            problems.append(f"risk rules: {exc}")
    if problems:
        raise CairnError("nothing was saved: " + "\n".join(problems))
    done: list[str] = []
    steps: list[tuple[str, Callable[[], object]]] = [
        (key, partial(cairn.settings.set, key, value)) for key, value in changes.set.items()
    ]
    steps += [(key, partial(cairn.settings.unset, key)) for key in changes.unset]
    if changes.rules_text is not None:
        steps.append(("risk rules", partial(cairn.approvals.set_risk_rules, changes.rules_text)))
    for name, step in steps:
        try:
            step()
        except (CairnError, OSError) as exc:  # refused, or the disk failed: say what was saved
            saved = f"saved {', '.join(done)}; " if done else "nothing was saved; "
            raise CairnError(f"{saved}could not save {name}: {describe_error(exc)}") from exc
        done.append(name)
    return load_settings(cairn)


def applicable_keys(engine: str, keys: list[str]) -> list[str]:
    """The settings keys that mean something for the engine: none for one that talks to no model
    (the shell engine runs the task's commands itself), all of them for an agent engine."""
    cls = ENGINES.get(engine)
    if cls is not None and not cls().needs_model:
        return []
    return list(keys)


# -- signing engines in --------------------------------------------------------------------------


def engine_status(cairn: Cairn, engine: str) -> EngineStatus:
    """The engine's program (found where people install it), sign-in and endpoint (on a job's
    thread: it probes the program and reads the keyring)."""
    return signin.status(cairn.credentials, engine, cairn.settings)


def sign_engine_in(cairn: Cairn, engine: str, value: str, kind: str | None) -> CredentialKind:
    """Keep the value in the keyring for the engine (on a write job's thread)."""
    return signin.sign_in(cairn.credentials, engine, value, kind)


# -- credentials ---------------------------------------------------------------------------------

SHORT_ID = 7


def short_id(task_id: str) -> str:
    return f"…{task_id[-SHORT_ID:]}" if len(task_id) > SHORT_ID + 1 else task_id


def task_label(task_id: str, title: str) -> str:
    return f"{title} · {short_id(task_id)}"


@dataclass(frozen=True)
class GrantRow:
    """One line of the grants table: a grant in effect, or a secret revoked in the lineage."""

    secret_name: str
    env_var: str | None
    scope: str | None
    from_task_id: str | None  # the ancestor the grant is inherited from; None when it is the task's
    revoked: bool = False


def grant_rows(task_id: str, grants: list[Grant], revoked: list[str]) -> list[GrantRow]:
    rows = [
        GrantRow(g.secret_name, g.env_var, g.scope, None if g.task_id == task_id else g.task_id)
        for g in grants
    ]
    rows += [GrantRow(name, None, None, None, revoked=True) for name in revoked]
    return rows


def task_titles(cairn: Cairn) -> list[tuple[str, str]]:
    """Every task as (id, title), for choosing whose grants to show."""
    return [(t.id, t.title) for t in cairn.tasks.all()]


def task_grants(cairn: Cairn, task_id: str) -> tuple[str, list[Grant], list[str]]:
    """The grants in effect for a task (its own and inherited) and the secrets revoked in its
    lineage."""
    credentials = cairn.credentials
    return task_id, credentials.grants_for(task_id), credentials.revoked_for(task_id)


def grant_holders(cairn: Cairn, secret_name: str) -> list[tuple[str, str]]:
    """The tasks with a grant of this secret, as (id, title)."""
    return [(t.id, t.title) for t in cairn.credentials.tasks_granted(secret_name)]
