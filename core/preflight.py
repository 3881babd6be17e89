"""Preflight: what an agent run needs, checked in a second before anything is made for it.

Owns the order and wording of the checks a run's start (or resume) makes before a run row, a
sandbox or a proxy exists: the engine's binary found and able to do what the engine uses, the
network policy able to reach the model, and a credential in an unlocked keyring. A failed check is
one CairnError naming the problem and its fix. Finding binaries is core.engines.discovery's;
carrying the credential to the model is the egress proxy's.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.context import Lazy
from core.credentials import Credentials, KeyringUnavailable
from core.engines import engine_for
from core.engines.base import EngineSettings
from core.engines.discovery import Found, find_engine, settings_with
from core.errors import CairnError
from core.policy import Policy
from core.settings import Settings, engine_endpoint, refuse_unreachable
from core.signin import SignIn, signed_in_with

SIGN_IN_FIX = "sign in with `cairnctl engine login {engine}` or Settings ▸ Engines ▸ Sign in"


class NotSignedIn(CairnError):
    """No credential for an agent engine in the keyring."""


@dataclass(frozen=True)
class Ready:
    """What a run of the engine starts with once every check passed."""

    engine: str
    settings: EngineSettings  # with `binary` set to the native executable that was found
    found: Found | None  # None for engines without a binary of their own (shell)
    endpoint: str | None  # host:port of the model
    base_url: str | None  # the model's URL outside the sandbox
    credential: SignIn | None  # the kind and the keyring secret the requests are signed with

    @property
    def note(self) -> str | None:
        return self.found.note if self.found else None


def check(engine: str, policy: Policy, settings: Settings, credentials: Lazy[Credentials]) -> Ready:
    """Every check an agent run needs before anything is made for it; CairnError (one line and
    the fix) on the first that fails."""
    eng = engine_for(engine)
    engine_settings = settings.engine(engine)
    if not eng.needs_model:
        return Ready(engine, engine_settings, None, None, None, None)
    found = find_engine(engine, engine_settings)
    if not found.usable or found.binary is None:
        raise CairnError(found.problem or f"the {engine} engine's binary cannot be used")
    engine_settings = settings_with(engine_settings, found)
    endpoint = engine_endpoint(engine, engine_settings)
    refuse_unreachable(engine, policy, endpoint)
    fix = SIGN_IN_FIX.format(engine=engine)
    try:
        credential = signed_in_with(credentials.get(), engine, engine_settings)
    except KeyringUnavailable as exc:
        raise NotSignedIn(
            f"the {engine} engine's credential cannot be read: {exc.message}"
        ) from exc
    if credential is None and engine_settings.api_key_secret:
        raise NotSignedIn(
            f"the {engine} engine is set to use the keyring secret "
            f"{engine_settings.api_key_secret!r}, which is not in the keyring",
            hint=f"{fix}, or unset engines.{engine}.api_key_secret",
        )
    if credential is None:
        names = " or ".join(k.secret for k in eng.credential_kinds)
        raise NotSignedIn(
            f"the {engine} engine is not signed in (no {names} in the keyring)", hint=fix
        )
    return Ready(
        engine, engine_settings, found, endpoint, eng.base_url(engine_settings), credential
    )
