"""Credentials: secret values in the OS keyring, and grants that map a secret to an environment
variable for a task lineage, resolved afresh from the keyring for every exec.

Owns the keyring access (service `cairn`), the grant rules and resolution; the store keeps grant
rows (names only), core.redact hides values in output, and runs/sandboxes put the env into an exec.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import CairnError, Conflict, InputError, NotFound
from core.ids import new_id
from core.redact import Redactor, get_redactor

log = logging.getLogger(__name__)

SERVICE = "cairn"

SECRET_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ENV_VAR_RE = re.compile(r"[A-Z_][A-Z0-9_]*")

# The list of names lives in the keyring next to the values, under a key no valid secret name can
# take (":" is not allowed in one). Why there and not in the store: the keyring is per user while
# a store is per data folder (CAIRN_DATA_DIR), so only this list agrees with what the keyring
# holds whichever data folder is open; it is gone with the keyring; and it needs no schema change.
# Secret Service could list items by attribute, but keyring's API cannot do that portably.
INDEX_KEY = "cairn:index"

SCOPE_LINEAGE = "lineage"  # the task and all its descendants
SCOPE_TASK = "task"  # the task alone
SCOPES = (SCOPE_LINEAGE, SCOPE_TASK)

_UNLOCK_HINT = "start/unlock your desktop keyring (gnome-keyring / KWallet)"


# -- errors ----------------------------------------------------------------------------------------


class KeyringUnavailable(CairnError):
    """No usable OS keyring: no backend, no D-Bus session, or the service failed."""

    def __init__(self, detail: str):
        super().__init__(f"no usable keyring: {detail}; {_UNLOCK_HINT}")
        self.detail = detail


class KeyringLocked(KeyringUnavailable):
    """The keyring is there but locked, and its unlock prompt was dismissed or never shown."""

    def __init__(self, detail: str):
        CairnError.__init__(
            self,
            f"the keyring is locked ({detail}); unlock your desktop keyring "
            "(gnome-keyring / KWallet) and try again",
        )
        self.detail = detail


class SecretMissing(CairnError):
    """A secret a grant names is not in the keyring."""

    def __init__(self, name: str, others: Sequence[str] = ()):
        self.names = [name, *others]
        if others:
            listed = ", ".join(repr(n) for n in self.names)
            message = f"the secrets {listed} are not in the keyring"
        else:
            message = f"the secret {name!r} is not in the keyring"
        super().__init__(message, hint="store it again under that name, or revoke the grant")
        self.name = name


def validate_secret_name(name: str) -> str:
    if not isinstance(name, str) or not SECRET_NAME_RE.fullmatch(name):
        raise InputError(
            f"{name!r} is not a valid secret name: use 1 to 64 letters, digits, '_', '.' or '-'"
        )
    return name


def validate_env_var(env_var: str) -> str:
    if not isinstance(env_var, str) or not ENV_VAR_RE.fullmatch(env_var):
        raise InputError(
            f"{env_var!r} is not a valid environment variable name: use capital "
            "letters, digits and '_', not starting with a digit"
        )
    return env_var


# -- the keyring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyringStatus:
    """What `SecretStore.check()` found, for the settings page and `cairnctl`."""

    backend: str  # dotted class name, e.g. keyring.backends.SecretService.Keyring
    kind: str  # "os", "plaintext", "alt", "fail" or "unknown"
    usable: bool  # a read went through
    locked: bool
    message: str  # one line, fit to show as it is
    warning: str | None = None

    @property
    def real(self) -> bool:
        """Values are kept by the operating system's keyring, not a file or nothing."""
        return self.kind == "os"

    @property
    def ok(self) -> bool:
        return self.usable and self.real


_OS_BACKENDS = {
    "keyring.backends.SecretService.Keyring",
    "keyring.backends.libsecret.Keyring",
    "keyring.backends.kwallet.DBusKeyring",
    "keyring.backends.kwallet.DBusKeyringKWallet4",
    "keyring.backends.macOS.Keyring",
    "keyring.backends.Windows.WinVaultKeyring",
}


def _dotted(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def backend_kind(backend: object) -> str:
    """Classify a keyring backend: a real OS keyring, a keyrings.alt file, or no keyring at all."""
    name = _dotted(backend)
    inner = getattr(backend, "backends", None)
    if name.startswith("keyring.backends.chainer.") and inner:
        return backend_kind(inner[0])  # the chainer tries its highest-priority backend first
    if name in _OS_BACKENDS:
        return "os"
    if name.startswith(("keyring.backends.fail.", "keyring.backends.null.")):
        return "fail"
    if name.startswith("keyrings.alt."):
        return "plaintext" if "Plaintext" in type(backend).__name__ else "alt"
    return "unknown"


def _backend_warning(backend: object, kind: str) -> str | None:
    inner = getattr(backend, "backends", None) or [backend]
    if any(backend_kind(b) == "plaintext" for b in inner):
        return (
            f"secrets would be stored unencrypted in a file by {_dotted(backend)} "
            "(keyrings.alt); remove keyrings.alt or set PYTHON_KEYRING_BACKEND to your "
            "desktop keyring"
        )
    if kind == "alt":
        return f"{_dotted(backend)} (keyrings.alt) keeps secrets in a file, not the OS keyring"
    if kind == "unknown":
        return f"{_dotted(backend)} is not a keyring Cairn recognises as the OS keyring"
    return None


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def _why_no_secret_service() -> str | None:
    """On Linux desktops the keyring is the Secret Service over D-Bus: say why it is not there."""
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    bus = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if not bus:
        return "no D-Bus session: DBUS_SESSION_BUS_ADDRESS is not set"
    try:
        from keyring.backends import SecretService

        SecretService.Keyring.priority  # noqa: B018 - probes the bus and the service
    except Exception as exc:  # noqa: BLE001 - whatever it is, it is the reason
        text = _first_line(str(exc)) or type(exc).__name__
        if isinstance(exc, OSError):
            return f"the D-Bus session at {bus} is unreachable: {text}"
        return f"Secret Service: {text}"
    return None


def _translate(exc: BaseException, redactor: Redactor) -> KeyringUnavailable:
    """A keyring library failure as one of ours, with a one-line reason."""
    from keyring import errors as kerrors

    detail = redactor.redact(_first_line(str(exc))) or type(exc).__name__
    if isinstance(exc, kerrors.KeyringLocked):
        return KeyringLocked(detail)
    if "Prompt dismissed" in detail:
        # gnome-keyring asks for a password to unlock (or create) the login keyring; no answer.
        return KeyringLocked("the unlock prompt was dismissed")
    if isinstance(exc, kerrors.NoKeyringError):
        reason = "no OS keyring backend found"
        why = _why_no_secret_service()
        return KeyringUnavailable(f"{reason} ({why})" if why else reason)
    return KeyringUnavailable(f"{type(exc).__name__}: {detail}")


class SecretStore:
    """Secrets in the OS keyring under one service name (`cairn`), plus the list of their names.

    Values go into the keyring and come out only to be put into an exec's environment; every value
    that passes through here is registered with the redactor so output can hide it.
    """

    def __init__(
        self, service: str = SERVICE, *, backend: Any = None, redactor: Redactor | None = None
    ):
        self.service = service
        self._backend = backend
        self._redactor = redactor or get_redactor()
        self._index_lock = threading.Lock()
        self._warned = False

    @property
    def backend(self) -> Any:
        if self._backend is None:
            import keyring

            self._backend = keyring.get_keyring()
        return self._backend

    def _usable_backend(self) -> Any:
        backend = self.backend
        kind = backend_kind(backend)
        if kind == "fail":
            from keyring.errors import NoKeyringError

            raise _translate(NoKeyringError(_dotted(backend)), self._redactor)
        if not self._warned:
            warning = _backend_warning(backend, kind)
            if warning:
                log.warning("keyring: %s", warning)
            self._warned = True
        return backend

    def _call(self, method: str, *args: str) -> Any:
        backend = self._usable_backend()
        try:
            return getattr(backend, method)(self.service, *args)
        except CairnError:
            raise
        except Exception as exc:  # the backends raise library-specific errors of every kind
            raise _translate(exc, self._redactor) from exc

    # -- values --

    def set(self, name: str, value: str) -> None:
        """Store (or rotate) a secret: the next `get` and the next resolved exec see the new one."""
        validate_secret_name(name)
        if not isinstance(value, str) or not value:
            raise InputError(f"the secret {name!r} needs a non-empty text value")
        self._redactor.register(name, value)
        self._call("set_password", name, value)
        self._update_index(add=name)

    def get(self, name: str) -> str:
        """The current value, read from the keyring now; SecretMissing when there is none."""
        validate_secret_name(name)
        value = self._call("get_password", name)
        if value is None:
            raise SecretMissing(name)
        self._redactor.register(name, value)
        return value

    def delete(self, name: str) -> None:
        """Remove a secret; SecretMissing when neither the keyring nor the list of names has it."""
        from keyring.errors import PasswordDeleteError

        validate_secret_name(name)
        try:
            self._call("delete_password", name)
            present = True
        except KeyringUnavailable as exc:
            if not isinstance(exc.__cause__, PasswordDeleteError):
                raise
            present = False
        listed = self._update_index(remove=name)
        if not present and not listed:
            raise SecretMissing(name)

    def names(self) -> list[str]:
        """The names of the secrets stored through Cairn (values are not read)."""
        return sorted(self._read_index())

    def has(self, name: str) -> bool:
        validate_secret_name(name)
        return self._call("get_password", name) is not None

    # -- the list of names --

    def _read_index(self) -> builtins.set[str]:
        raw = self._call("get_password", INDEX_KEY)
        if not raw:
            return set()
        try:
            names = json.loads(raw)["names"]
            return {n for n in names if isinstance(n, str) and SECRET_NAME_RE.fullmatch(n)}
        except (ValueError, KeyError, TypeError):
            log.warning(
                "keyring: the list of secret names under %r is unreadable; starting a new one",
                self.service,
            )
            return set()

    def _update_index(self, *, add: str | None = None, remove: str | None = None) -> bool:
        """Add or remove a name; whether the list changed. Serialised within the process; two
        processes writing at the same instant can lose a name from the list (not the value), which
        the next `set` of that name puts back."""
        with self._index_lock:
            names = self._read_index()
            before = builtins.set(names)
            if add:
                names.add(add)
            if remove:
                names.discard(remove)
            if names == before:
                return False
            self._call(
                "set_password", INDEX_KEY, json.dumps({"version": 1, "names": sorted(names)})
            )
            return True

    # -- health --

    def check(self) -> KeyringStatus:
        """Which backend is in charge, whether a read goes through, and what to tell the user.

        On a desktop a locked keyring shows its unlock prompt here and waits for it: call this off
        the GUI thread.
        """
        backend = self.backend
        name = _dotted(backend)
        kind = backend_kind(backend)
        warning = _backend_warning(backend, kind)
        try:
            self._usable_backend()
            self._backend_read_probe(backend)
        except KeyringUnavailable as exc:
            return KeyringStatus(
                name,
                kind,
                usable=False,
                locked=isinstance(exc, KeyringLocked),
                message=str(exc),
                warning=warning,
            )
        if kind == "os":
            message = f"secrets are kept in the OS keyring ({name})"
        else:
            message = f"the keyring works, but {warning}"
        return KeyringStatus(
            name, kind, usable=True, locked=False, message=message, warning=warning
        )

    def _backend_read_probe(self, backend: Any) -> None:
        try:
            backend.get_password(self.service, INDEX_KEY)
        except Exception as exc:
            raise _translate(exc, self._redactor) from exc


# -- grants ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """A secret name mapped to an environment variable on a task; no value, ever."""

    id: str
    task_id: str
    secret_name: str
    env_var: str
    scope: str
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _grant(row: dict[str, Any]) -> Grant:
    return Grant(
        **{
            k: row[k]
            for k in (
                "id",
                "task_id",
                "secret_name",
                "env_var",
                "scope",
                "created_at",
                "revoked_at",
            )
        }
    )


@dataclass(frozen=True)
class ResolvedEnv:
    """The environment for one exec, read from the keyring just now, with names for the record.

    `env` holds values: never log or persist it; `record()` is what a run keeps.
    """

    env: dict[str, str] = field(repr=False)
    missing: list[str]  # secret names granted but not in the keyring (or the keyring unusable)
    revoked: list[str]  # secret names whose grant in this lineage was revoked
    granted: list[str]  # secret names delivered in `env`
    problem: str | None = None  # why `missing` is not empty, when it is the keyring itself

    @property
    def env_vars(self) -> list[str]:
        return sorted(self.env)

    def record(self) -> dict[str, Any]:
        return {
            "env_vars": self.env_vars,
            "secrets": self.granted,
            "missing": self.missing,
            "revoked": self.revoked,
            "problem": self.problem,
        }


class Credentials:
    """Grants of keyring secrets to task lineages, and their resolution into an exec environment.

    Lineage rule: a grant on a task (scope `lineage`, the default) applies to the task and all its
    descendants; scope `task` applies to that task alone. Per environment variable the grant on the
    nearest task wins (the task itself, then its parent, ...). Revoking a secret on a task blocks,
    for that task and its descendants, every grant of that secret made before the revocation, on
    the task or on any ancestor; only a grant made afterwards (a new row) delivers it again.
    """

    def __init__(self, store: Any, secrets: SecretStore, *, redactor: Redactor | None = None):
        self.store = store
        self.secrets = secrets
        self._redactor = redactor or get_redactor()

    # -- the keyring's state and what is in it (names only; values never leave for a caller) --

    def keyring_status(self) -> KeyringStatus:
        """Which keyring holds the secrets and whether it answers. A locked keyring may show its
        unlock prompt and wait for it: call this off the GUI thread."""
        return self.secrets.check()

    def secret_names(self) -> list[str]:
        """The names of the secrets stored through Cairn, sorted; values are not read."""
        return self.secrets.names()

    def tasks_granted(self, secret_name: str) -> list[Any]:
        """The tasks holding an active grant of the secret themselves (their descendants may
        inherit it), oldest first."""
        tasks = self.store.list_tasks()
        holders: set[str] = set()
        for i in range(0, len(tasks), 500):  # within SQLite's limit on bound parameters
            rows = self.store.grant_rows_for_tasks([t.id for t in tasks[i : i + 500]])
            holders.update(
                r["task_id"]
                for r in rows
                if r["secret_name"] == secret_name and r["revoked_at"] is None
            )
        return [t for t in tasks if t.id in holders]

    def grant(
        self, task_id: str, secret_name: str, env_var: str, *, scope: str = SCOPE_LINEAGE
    ) -> Grant:
        """Map `secret_name` to `env_var` for the task (and its descendants with scope lineage).

        The keyring is not touched: a secret may be stored after it is granted; resolving reports
        it missing until then. Granting what the task already has returns the existing grant.
        """
        validate_secret_name(secret_name)
        validate_env_var(env_var)
        if scope not in SCOPES:
            raise InputError(f"{scope!r} is not a grant scope: use {' or '.join(SCOPES)}")
        with self.store.transaction():
            chain = self.store.task_ancestry(task_id)
            rows = self.store.grant_rows_for_tasks(chain)
            for row in rows:
                if row["task_id"] != task_id or row["revoked_at"] is not None:
                    continue
                if row["env_var"] == env_var:
                    if row["secret_name"] == secret_name and row["scope"] == scope:
                        return _grant(row)
                    raise Conflict(
                        f"{env_var} is already granted on task {task_id} from the secret "
                        f"{row['secret_name']!r} with scope {row['scope']}; revoke that first"
                    )
            # A new grant must come after every revocation of this secret in the lineage, or it
            # would be blocked by it: guard against equal timestamps and a clock set back.
            latest_revocation = max(
                (
                    r["revoked_at"]
                    for r in rows
                    if r["secret_name"] == secret_name and r["revoked_at"]
                ),
                default=0.0,
            )
            now = max(time.time(), latest_revocation + 1e-6)
            row = {
                "id": new_id("grant"),
                "task_id": task_id,
                "secret_name": secret_name,
                "env_var": env_var,
                "scope": scope,
                "created_at": now,
                "revoked_at": None,
            }
            self.store.add_grant_row(row)
        return _grant(row)

    def revoke(self, task_id: str, secret_name: str) -> list[Grant]:
        """Stop delivering `secret_name` to the task and its descendants; the revoked grants.

        A grant on the task itself gets its revoked_at set. A secret the task only inherits gets a
        revocation row on the task, so the ancestor (and its other descendants) keep their grant.
        NotFound when the secret reaches the task through no grant at all.
        """
        validate_secret_name(secret_name)
        with self.store.transaction():
            chain = self.store.task_ancestry(task_id)
            rows = self.store.grant_rows_for_tasks(chain)
            effective = [g for g in self._effective(chain, rows) if g.secret_name == secret_name]
            own = [
                r
                for r in rows
                if r["task_id"] == task_id
                and r["secret_name"] == secret_name
                and r["revoked_at"] is None
            ]
            if not own and not effective:
                raise NotFound(f"task {task_id} has no grant of the secret {secret_name!r}")
            now = time.time()
            # Never before the grants it revokes: the rule compares these two times.
            now = max([now] + [g.created_at for g in effective] + [r["created_at"] for r in own])
            self.store.revoke_grant_rows(task_id, secret_name, now)
            revoked = [_grant({**r, "revoked_at": now}) for r in own]
            if not own:
                for g in effective:
                    row = {
                        "id": new_id("grant"),
                        "task_id": task_id,
                        "secret_name": secret_name,
                        "env_var": g.env_var,
                        "scope": SCOPE_LINEAGE,
                        "created_at": now,
                        "revoked_at": now,
                    }
                    self.store.add_grant_row(row)
                    revoked.append(_grant(row))
        return revoked

    def grants_for(self, task_id: str) -> list[Grant]:
        """The grants in effect for the task now (nearest ancestor wins per env var), by env var."""
        chain = self.store.task_ancestry(task_id)
        return self._effective(chain, self.store.grant_rows_for_tasks(chain))

    def revoked_for(self, task_id: str) -> list[str]:
        """Secret names revoked in the task's lineage and not delivered to it by another grant."""
        chain = self.store.task_ancestry(task_id)
        rows = self.store.grant_rows_for_tasks(chain)
        return self._revoked_names(rows, self._effective(chain, rows))

    @staticmethod
    def _effective(chain: list[str], rows: list[dict[str, Any]]) -> list[Grant]:
        depth = {task: i for i, task in enumerate(chain)}
        # A revocation applies to its task's whole subtree whatever the scope of the revoked row.
        revocations = [r for r in rows if r["revoked_at"] is not None]
        best: dict[str, tuple[int, float, dict[str, Any]]] = {}
        for row in rows:
            if row["revoked_at"] is not None:
                continue
            level = depth[row["task_id"]]
            if level > 0 and row["scope"] != SCOPE_LINEAGE:
                continue
            blocked = any(
                r["secret_name"] == row["secret_name"]
                and depth[r["task_id"]] <= level
                and r["revoked_at"] >= row["created_at"]
                for r in revocations
            )
            if blocked:
                continue
            key = (level, -row["created_at"])
            current = best.get(row["env_var"])
            if current is None or key < (current[0], current[1]):
                best[row["env_var"]] = (key[0], key[1], row)
        return [_grant(best[env][2]) for env in sorted(best)]

    @staticmethod
    def _revoked_names(rows: list[dict[str, Any]], effective: list[Grant]) -> list[str]:
        delivered = {g.secret_name for g in effective}
        return sorted({r["secret_name"] for r in rows if r["revoked_at"] is not None} - delivered)

    def resolve_env(self, task_id: str, *, require: bool = True) -> ResolvedEnv:
        """The environment for the task's next exec, read from the keyring now (so a rotated
        secret is what this exec sees), with the names for the run's record.

        With `require` (a run about to start) a missing secret raises SecretMissing and an unusable
        keyring KeyringUnavailable / KeyringLocked: the caller refuses to start. Without it they
        are reported in `missing` (and `problem`). A task with no grants never touches the keyring.
        """
        chain = self.store.task_ancestry(task_id)
        rows = self.store.grant_rows_for_tasks(chain)
        grants = self._effective(chain, rows)
        revoked = self._revoked_names(rows, grants)
        env: dict[str, str] = {}
        values: dict[str, str] = {}
        missing: list[str] = []
        problem: str | None = None
        for g in grants:
            if g.secret_name in missing:
                continue
            if g.secret_name not in values:
                try:
                    values[g.secret_name] = self.secrets.get(g.secret_name)
                except SecretMissing:
                    missing.append(g.secret_name)
                    continue
                except KeyringUnavailable as exc:
                    if require:
                        raise
                    problem = str(exc)
                    missing = sorted({x.secret_name for x in grants})
                    env, values = {}, {}
                    break
            self._redactor.register(g.secret_name, values[g.secret_name])
            env[g.env_var] = values[g.secret_name]
        if missing and require:
            raise SecretMissing(missing[0], missing[1:])
        return ResolvedEnv(
            env=env,
            missing=sorted(set(missing)),
            revoked=revoked,
            granted=sorted(values),
            problem=problem,
        )
