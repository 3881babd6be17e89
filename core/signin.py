"""Signing an agent engine in: a person's API key or subscription token kept in the OS keyring
under the usual name of its kind, and what an engine has of what a run needs (its binary, a
credential, an endpoint the default policy lets a new task reach), each problem with its fix.

Owns guessing and checking a credential's kind, where an engine's credential is read from (the
`engines.<e>.api_key_secret` setting when set, else the kinds' usual names) and the wording of an
engine's status. The keyring is core.credentials', finding the binary core.engines.discovery's,
the kinds and endpoints the engines', the default policy core.settings'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.credentials import (
    Credentials,
    KeyringLocked,
    KeyringUnavailable,
    SecretMissing,
)
from core.engines import ENGINES, engine_for
from core.engines.base import CredentialKind, Engine, EngineSettings
from core.engines.codex import CHATGPT_SIGN_IN_NOTE
from core.engines.discovery import Found, find_engine
from core.errors import CairnError, InputError, NotFound
from core.policy import Policy
from core.settings import Settings, engine_endpoint, reaches_endpoint

# What a person can do about a problem where the GUI offers a button for it.
ACTION_SIGN_IN = "sign-in"
ACTION_CHOOSE_BINARY = "choose-binary"

# Said beside an engine's sign-in, where one of its usual ways of signing in cannot be used.
SIGN_IN_NOTES: dict[str, str] = {"codex": CHATGPT_SIGN_IN_NOTE}

UNLOCK_FIX = "unlock your desktop keyring (gnome-keyring / KWallet), then check again"
INSTALL_KEYRING = "sudo apt install gnome-keyring"


@dataclass(frozen=True)
class Problem:
    """Something in the way of an engine's first run: what it is and the fix, one line each;
    `command` is the shell command inside `fix` when there is one to copy, `action` what the GUI
    can offer for it (ACTION_SIGN_IN, ACTION_CHOOSE_BINARY)."""

    what: str
    fix: str | None = None
    command: str | None = None
    action: str | None = None

    def __str__(self) -> str:
        return f"{self.what}; {self.fix}" if self.fix else self.what

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "fix": self.fix, "command": self.command, "action": self.action}


@dataclass(frozen=True)
class SignIn:
    """Where an engine's credential is read from: the kind, the keyring name, and whether the
    name came from the `api_key_secret` setting ("setting") or is the kind's usual one
    ("keyring")."""

    kind: CredentialKind
    secret: str
    source: str


@dataclass(frozen=True)
class EngineStatus:
    """What an engine has of what its first run needs; `problems` each say the fix."""

    engine: str
    found: Found
    signed_in: str | None  # the kind ("oauth-token", "api-key"), None when not signed in
    issues: tuple[Problem, ...] = ()
    sign_in: SignIn | None = None
    endpoint: str | None = None  # the model endpoint's base URL (None: the engine needs none)
    endpoint_entry: str | None = None  # ... as the host:port a policy must admit
    network: str | None = None  # the network of a new task's default policy
    reachable: bool | None = None  # whether that policy lets the engine reach its endpoint
    note: str | None = None  # a plain word about signing in (Codex's ChatGPT sign-in)

    @property
    def problems(self) -> list[str]:
        """Each problem as one line with its fix."""
        return [str(p) for p in self.issues]

    @property
    def ok(self) -> bool:
        return not self.issues

    @property
    def signed_in_label(self) -> str | None:
        return self.sign_in.kind.label if self.sign_in else None

    def to_dict(self) -> dict[str, Any]:
        found = self.found
        return {
            "engine": self.engine,
            "found": found.usable,
            "path": str(found.path) if found.path else None,
            "binary": str(found.binary) if found.binary else None,
            "version": found.version,
            "source": found.source,
            "note": found.note,
            "missing": list(found.missing),
            "signed_in": self.signed_in,
            "signed_in_label": self.signed_in_label,
            "secret": self.sign_in.secret if self.sign_in else None,
            "secret_source": self.sign_in.source if self.sign_in else None,
            "endpoint": self.endpoint,
            "endpoint_entry": self.endpoint_entry,
            "network": self.network,
            "reachable": self.reachable,
            "sign_in_note": self.note,
            "problems": [p.to_dict() for p in self.issues],
            "ok": self.ok,
        }


# -- engines and their kinds ---------------------------------------------------------------------


def agent_engines() -> list[str]:
    """The engines that talk to a model (and so need a binary, a credential and a network), in a
    fixed order."""
    return sorted(name for name, cls in ENGINES.items() if cls().needs_model)


def kinds_of(engine: str) -> tuple[CredentialKind, ...]:
    """The ways to sign the engine in, preferred first (empty for the shell engine)."""
    return engine_for(engine).credential_kinds


def _kind_named(engine: Engine, kind: str) -> CredentialKind:
    for k in engine.credential_kinds:
        if k.kind == kind:
            return k
    known = ", ".join(k.kind for k in engine.credential_kinds)
    raise InputError(f"the {engine.name} engine has no credential kind {kind!r} (known: {known})")


def looks_like(value: str) -> tuple[str, CredentialKind] | None:
    """The engine and kind whose usual start the value has (the longest such start wins, so an
    Anthropic key is not taken for an OpenAI one); None when no kind's start matches."""
    best: tuple[str, CredentialKind] | None = None
    for name in sorted(ENGINES):
        for k in ENGINES[name]().credential_kinds:
            longer = best is None or len(k.prefix or "") > len(best[1].prefix or "")
            if k.prefix and value.startswith(k.prefix) and longer:
                best = (name, k)
    return best


def _labels(kinds: tuple[CredentialKind, ...]) -> str:
    return " or ".join(f"an {k.label}" if k.label[:1] in "AEIOU" else f"a {k.label}" for k in kinds)


def guess_kind(engine: str, value: str, kind: str | None = None) -> CredentialKind:
    """The kind the value is stored as: `kind` when given, else the one its start names; a value
    that plainly is another kind (or another engine's) is refused saying which. The value itself
    is never part of a message, only the usual start it has."""
    eng = engine_for(engine)
    if not eng.credential_kinds:
        raise InputError(f"the {engine} engine runs your commands; it needs no sign-in")
    chosen = _kind_named(eng, kind) if kind else None
    seen = looks_like(value)
    if seen is not None:
        seen_engine, seen_kind = seen
        if seen_engine != engine:
            raise InputError(
                f"this looks like {_labels((seen_kind,))} ({seen_kind.prefix}…) for the "
                f"{seen_engine} engine; the {engine} engine takes "
                f"{_labels(eng.credential_kinds)}"
            )
        if chosen is not None and seen_kind.kind != chosen.kind:
            raise InputError(
                f"this looks like {_labels((seen_kind,))} ({seen_kind.prefix}…), not "
                f"{_labels((chosen,))}: use --kind {seen_kind.kind}, or leave the kind out"
            )
        return chosen or seen_kind
    if chosen is not None:
        return chosen
    if len(eng.credential_kinds) == 1:
        return eng.credential_kinds[0]
    starts = " nor ".join(f"{k.prefix}…" for k in eng.credential_kinds if k.prefix)
    choices = " or ".join(f"--kind {k.kind}" for k in eng.credential_kinds)
    raise InputError(
        f"cannot tell which kind of credential this is (it starts with neither {starts}): "
        f"name it with {choices}"
    )


def clean_value(value: str) -> str:
    """The value as pasted, without any whitespace (tokens have none; a terminal's line wrap or a
    trailing newline does)."""
    return "".join(value.split()) if isinstance(value, str) else ""


# -- signing in and out --------------------------------------------------------------------------


def sign_in(
    credentials: Credentials, engine: str, value: str, kind: str | None = None
) -> CredentialKind:
    """Keep `value` in the keyring under the kind's usual name (guessed from the value's start
    when `kind` is None); the kind it was stored as. Every task of the engine uses it from the
    next request on."""
    cleaned = clean_value(value)
    eng = engine_for(engine)
    if not cleaned:
        how = "; ".join(k.how for k in eng.credential_kinds if k.how)
        raise InputError(
            f"no value to sign the {engine} engine in with" + (f": {how}" if how else "")
        )
    chosen = guess_kind(engine, cleaned, kind)
    credentials.secrets.set(chosen.secret, cleaned)
    return chosen


def sign_out(
    credentials: Credentials, engine: str, kind: str | None = None
) -> list[CredentialKind]:
    """Remove the engine's credentials kept under their usual names (only `kind`'s when given);
    the kinds removed. NotFound when there was none."""
    eng = engine_for(engine)
    if not eng.credential_kinds:
        raise InputError(f"the {engine} engine runs your commands; it needs no sign-in")
    kinds = (_kind_named(eng, kind),) if kind else eng.credential_kinds
    removed = []
    for k in kinds:
        try:
            credentials.secrets.delete(k.secret)
        except SecretMissing:
            continue
        removed.append(k)
    if not removed:
        names = " or ".join(k.secret for k in kinds)
        raise NotFound(f"the {engine} engine is not signed in (no {names} in the keyring)")
    return removed


def signed_in_with(
    credentials: Credentials, engine: str, settings: EngineSettings
) -> SignIn | None:
    """Where the engine's credential is read from: the secret `api_key_secret` names when it is
    set (its kind told by the name, else by the value's start), else the first kind whose usual
    name is in the keyring. None when there is none. KeyringUnavailable (or KeyringLocked) when
    the keyring cannot be read."""
    eng = engine_for(engine)
    if not eng.credential_kinds:
        return None
    secrets = credentials.secrets
    named = settings.api_key_secret
    if named:
        if not secrets.has(named):
            return None
        by_name = next((k for k in eng.credential_kinds if k.secret == named), None)
        if by_name is None:
            seen = looks_like(secrets.get(named))
            by_name = next(
                (k for k in eng.credential_kinds if seen and seen[0] == engine and seen[1] == k),
                None,
            )
        if by_name is None:  # a key named by hand: it is what api_key_secret has always meant
            by_name = next(
                (k for k in eng.credential_kinds if k.kind == "api-key"), eng.credential_kinds[0]
            )
        return SignIn(by_name, named, "setting")
    for k in eng.credential_kinds:
        if secrets.has(k.secret):
            return SignIn(k, k.secret, "keyring")
    return None


# -- the default policy of a new task ------------------------------------------------------------


def _blocked(engine: str, entry: str, policy: Policy) -> Problem:
    command = "cairnctl config unset defaults.network"
    return Problem(
        f"a new {engine} task could not reach its model at {entry}: blocked by "
        f"defaults.network={policy.network}",
        f"let new agent tasks reach their endpoint and nothing else: {command} "
        "(or set it to allowlist)",
        command,
    )


# -- status --------------------------------------------------------------------------------------


def _not_found_problem(engine: str, found: Found) -> Problem:
    """The finder's problem says its fix already; installing is the command to copy when nothing
    was found at all, and choosing the binary by hand helps either way."""
    install = (engine_for(engine).install_hint() or None) if found.path is None else None
    if found.problem:
        return Problem(found.problem, None, install, ACTION_CHOOSE_BINARY)
    return Problem(
        f"the {engine} engine's CLI cannot be used",
        f"install it ({install}) or set engines.{engine}.binary" if install else None,
        install,
        ACTION_CHOOSE_BINARY,
    )


def _keyring_problem(engine: str, exc: KeyringUnavailable) -> Problem:
    if isinstance(exc, KeyringLocked):
        return Problem(
            f"the keyring is locked, so the {engine} engine's credential cannot be read",
            UNLOCK_FIX,
        )
    return Problem(
        f"no usable keyring ({exc.detail}), so the {engine} engine's credential cannot be read",
        f"install and unlock gnome-keyring or another Secret Service: {INSTALL_KEYRING}",
        INSTALL_KEYRING,
    )


def _not_signed_in(engine: str, eng: Engine, settings: EngineSettings) -> Problem:
    login = f"cairnctl engine login {engine}"
    named = settings.api_key_secret
    if named:
        return Problem(
            f"engines.{engine}.api_key_secret names the secret {named!r}, which is not in "
            "the keyring",
            f"store it (cairnctl secret set {named}), or unset the setting and sign in: {login}",
            login,
            ACTION_SIGN_IN,
        )
    usual = " or ".join(k.secret for k in eng.credential_kinds)
    return Problem(
        f"the {engine} engine is not signed in (no {usual} in the keyring)",
        f"sign in with {_labels(eng.credential_kinds)}: {login} (the value on stdin), "
        "or Sign in… in Settings ▸ Engines",
        login,
        ACTION_SIGN_IN,
    )


def _builtin(engine: str) -> Found:
    return Found(engine, None, None, None, "built in", None)


def status(credentials: Credentials, engine: str, settings: Settings) -> EngineStatus:
    """What the engine has of what a new task's first run needs: its binary (found where people
    install it), a credential in the keyring, and an endpoint the default policy of a new task
    lets it reach; each missing piece a Problem with its fix. Never raises for what it finds
    (an unreadable keyring or settings file is a problem too); may wait on the keyring's
    unlock prompt and runs the binary to probe it, so call it off the GUI thread."""
    eng = engine_for(engine)
    engine_settings = settings.engine(engine)
    if not eng.needs_model and not eng.credential_kinds:
        return EngineStatus(engine, _builtin(engine), None)
    issues: list[Problem] = []
    found = find_engine(engine, engine_settings)
    if not found.usable:
        issues.append(_not_found_problem(engine, found))

    sign: SignIn | None = None
    if eng.credential_kinds:
        try:
            sign = signed_in_with(credentials, engine, engine_settings)
        except KeyringUnavailable as exc:
            issues.append(_keyring_problem(engine, exc))
        except CairnError as exc:
            issues.append(Problem(f"the {engine} engine's credential cannot be read: {exc}"))
        else:
            if sign is None:
                issues.append(_not_signed_in(engine, eng, engine_settings))

    endpoint = eng.base_url(engine_settings)
    entry: str | None = None
    network: str | None = None
    reachable: bool | None = None
    if endpoint:
        try:
            entry = engine_endpoint(engine, engine_settings)
            policy = settings.default_policy_for(engine)
        except CairnError as exc:
            issues.append(
                Problem(
                    f"the {engine} engine's endpoint cannot be checked: {exc}",
                    "correct it in Settings (cairnctl config show)",
                )
            )
        else:
            network = policy.network
            reachable = reaches_endpoint(policy, entry)
            if not reachable and entry is not None:
                issues.append(_blocked(engine, entry, policy))

    return EngineStatus(
        engine,
        found,
        sign.kind.kind if sign else None,
        tuple(issues),
        sign,
        endpoint,
        entry,
        network,
        reachable,
        SIGN_IN_NOTES.get(engine),
    )


def facts(st: EngineStatus) -> list[str]:
    """What was found, one line each, for people (the problems are said apart)."""
    found = st.found
    lines = []
    if found.path is not None:
        version = f"version {found.version}" if found.version else "version unknown"
        line = f"Found {found.path} ({version}, from {found.source})"
        if found.binary is not None and found.binary != found.path:
            line += f"; runs {found.binary}"
        lines.append(line)
        if found.note:
            lines.append(found.note[:1].upper() + found.note[1:])
    else:
        lines.append("Not found")
    if st.sign_in is not None:
        where = (
            f"the secret {st.sign_in.secret} (engines.{st.engine}.api_key_secret)"
            if st.sign_in.source == "setting"
            else st.sign_in.secret
        )
        lines.append(f"Signed in with {st.sign_in.kind.label} (keyring: {where})")
    if st.endpoint and st.reachable:
        lines.append(
            f"Model endpoint {st.endpoint} allowed by a new task's default policy "
            f"(network {st.network})"
        )
    return lines
