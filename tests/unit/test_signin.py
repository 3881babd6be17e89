"""Signing engines in: the kind told by the value's start, a value of another kind or engine
refused with the reason (never the value), whitespace dropped, an empty value refused; a
credential under its usual name counts with no setting and `api_key_secret` still wins; the status
names the binary, the sign-in and whether a new task's default policy lets the engine reach its
endpoint, each problem with its fix, and a locked or missing keyring is one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import signin
from core.credentials import Credentials, KeyringLocked, KeyringUnavailable, SecretMissing
from core.engines.codex import CHATGPT_SIGN_IN_NOTE
from core.errors import InputError, NotFound
from core.settings import Settings
from core.signin import (
    ACTION_CHOOSE_BINARY,
    ACTION_SIGN_IN,
    Found,
    guess_kind,
    sign_in,
    sign_out,
    status,
)

OAUTH = "sk-ant-oat01-" + "a" * 40
ANTHROPIC_KEY = "sk-ant-api03-" + "b" * 40
OPENAI_KEY = "sk-proj-" + "c" * 40


class FakeSecrets:
    """SecretStore's methods sign-in uses, on a dict; `fail` makes every call raise it."""

    def __init__(self, values: dict[str, str] | None = None):
        self.values = dict(values or {})
        self.fail: Exception | None = None

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def set(self, name: str, value: str) -> None:
        self._check()
        self.values[name] = value

    def get(self, name: str) -> str:
        self._check()
        if name not in self.values:
            raise SecretMissing(name)
        return self.values[name]

    def has(self, name: str) -> bool:
        self._check()
        return name in self.values

    def delete(self, name: str) -> None:
        self._check()
        if self.values.pop(name, None) is None:
            raise SecretMissing(name)


@pytest.fixture
def secrets() -> FakeSecrets:
    return FakeSecrets()


@pytest.fixture
def creds(secrets) -> Credentials:
    return Credentials(None, secrets)  # type: ignore[arg-type]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(tmp_path)


@pytest.fixture(autouse=True)
def found_everywhere(monkeypatch):
    """Every engine's binary found, unless a test says otherwise (no real probing here)."""

    def fake(name, engine_settings, **_):
        path = Path(engine_settings.binary or f"/usr/local/bin/{name}")
        return Found(name, path, path, "2.1.197", "PATH", None)

    monkeypatch.setattr(signin, "find_engine", fake)


# -- the kind ------------------------------------------------------------------------------------


def test_the_kind_is_told_by_the_start_of_the_value():
    assert guess_kind("claude-code", OAUTH).kind == "oauth-token"
    assert guess_kind("claude-code", ANTHROPIC_KEY).kind == "api-key"
    assert guess_kind("codex", OPENAI_KEY).kind == "api-key"
    assert guess_kind("claude-code", OAUTH, "oauth-token").kind == "oauth-token"


def test_a_value_of_another_kind_is_refused_with_the_reason_and_never_shown():
    with pytest.raises(InputError) as caught:
        guess_kind("claude-code", OAUTH, "api-key")
    message = str(caught.value)
    assert "sk-ant-oat01-…" in message and "--kind oauth-token" in message
    assert OAUTH not in message
    with pytest.raises(InputError, match="for the claude-code engine; the codex engine takes"):
        guess_kind("codex", ANTHROPIC_KEY)
    with pytest.raises(InputError, match="OpenAI API key .* for the codex engine"):
        guess_kind("claude-code", OPENAI_KEY)


def test_an_unknown_start_needs_the_kind_unless_the_engine_has_one():
    with pytest.raises(InputError, match="--kind oauth-token or --kind api-key"):
        guess_kind("claude-code", "local-server-key")
    assert guess_kind("claude-code", "local-server-key", "api-key").kind == "api-key"
    assert guess_kind("codex", "local-server-key").kind == "api-key"
    with pytest.raises(InputError, match="no credential kind 'token'"):
        guess_kind("claude-code", OAUTH, "token")
    with pytest.raises(InputError, match="needs no sign-in"):
        guess_kind("shell", OAUTH)


# -- signing in and out --------------------------------------------------------------------------


def test_sign_in_stores_under_the_usual_name_without_whitespace(creds, secrets):
    kind = sign_in(creds, "claude-code", f"  {OAUTH[:20]}\n{OAUTH[20:]}\r\n")
    assert kind.kind == "oauth-token"
    assert secrets.values == {"CLAUDE_CODE_OAUTH_TOKEN": OAUTH}
    sign_in(creds, "codex", OPENAI_KEY + "\n")
    assert secrets.values["OPENAI_API_KEY"] == OPENAI_KEY


@pytest.mark.parametrize("value", ["", "   ", "\n\n"])
def test_an_empty_value_is_refused_with_where_to_get_one(creds, secrets, value):
    with pytest.raises(InputError, match="no value to sign the claude-code engine in with: run"):
        sign_in(creds, "claude-code", value)
    assert secrets.values == {}


def test_a_refused_value_stores_nothing(creds, secrets):
    with pytest.raises(InputError):
        sign_in(creds, "codex", ANTHROPIC_KEY)
    assert secrets.values == {}


def test_sign_out_removes_the_usual_names(creds, secrets):
    secrets.values.update(CLAUDE_CODE_OAUTH_TOKEN=OAUTH, ANTHROPIC_API_KEY=ANTHROPIC_KEY, X="1")
    assert [k.kind for k in sign_out(creds, "claude-code", "api-key")] == ["api-key"]
    assert set(secrets.values) == {"CLAUDE_CODE_OAUTH_TOKEN", "X"}
    assert [k.kind for k in sign_out(creds, "claude-code")] == ["oauth-token"]
    with pytest.raises(NotFound, match="not signed in"):
        sign_out(creds, "claude-code")
    assert secrets.values == {"X": "1"}


# -- status --------------------------------------------------------------------------------------


def test_a_credential_under_its_usual_name_counts_without_a_setting(creds, secrets, settings):
    secrets.values["ANTHROPIC_API_KEY"] = ANTHROPIC_KEY
    st = status(creds, "claude-code", settings)
    assert st.signed_in == "api-key" and st.sign_in and st.sign_in.source == "keyring"
    assert st.ok, st.problems
    assert st.endpoint == "https://api.anthropic.com"
    assert st.endpoint_entry == "api.anthropic.com:443"
    assert st.network == "allowlist" and st.reachable
    secrets.values["CLAUDE_CODE_OAUTH_TOKEN"] = OAUTH  # the preferred kind wins
    assert status(creds, "claude-code", settings).signed_in == "oauth-token"


def test_the_setting_still_wins(creds, secrets, settings):
    secrets.values.update(ANTHROPIC_API_KEY=ANTHROPIC_KEY, my_token=OAUTH)
    settings.set("engines.claude-code.api_key_secret", "my_token")
    st = status(creds, "claude-code", settings)
    assert st.sign_in and (st.sign_in.secret, st.sign_in.source) == ("my_token", "setting")
    assert st.signed_in == "oauth-token"  # told by the value's start
    settings.set("engines.claude-code.api_key_secret", "gone")
    st = status(creds, "claude-code", settings)
    assert st.signed_in is None
    (problem,) = st.issues
    assert "api_key_secret names the secret 'gone'" in problem.what
    assert problem.action == ACTION_SIGN_IN


def test_not_signed_in_says_how(creds, settings):
    st = status(creds, "codex", settings)
    (problem,) = st.issues
    assert problem.what == "the codex engine is not signed in (no OPENAI_API_KEY in the keyring)"
    assert problem.command == "cairnctl engine login codex" and problem.command in problem.fix
    assert problem.action == ACTION_SIGN_IN
    assert st.note == CHATGPT_SIGN_IN_NOTE
    assert st.problems == [f"{problem.what}; {problem.fix}"]


def test_a_locked_or_missing_keyring_is_a_problem_with_the_fix(creds, secrets, settings):
    secrets.fail = KeyringLocked("the unlock prompt was dismissed")
    (problem,) = status(creds, "claude-code", settings).issues
    assert problem.what.startswith("the keyring is locked")
    assert problem.fix == "unlock your desktop keyring (gnome-keyring / KWallet), then check again"
    secrets.fail = KeyringUnavailable("no OS keyring backend found")
    (problem,) = status(creds, "claude-code", settings).issues
    assert problem.what.startswith("no usable keyring (no OS keyring backend found)")
    assert problem.command == "sudo apt install gnome-keyring"


def test_an_endpoint_blocked_by_the_default_network_says_so(creds, secrets, settings):
    secrets.values["OPENAI_API_KEY"] = OPENAI_KEY
    settings.set("defaults.network", "none")
    st = status(creds, "codex", settings)
    assert st.reachable is False and st.network == "none"
    (problem,) = st.issues
    assert "blocked by defaults.network=none" in problem.what
    assert "api.openai.com:443" in problem.what
    assert problem.command == "cairnctl config unset defaults.network"
    settings.set("defaults.network", "open")
    assert status(creds, "codex", settings).ok


def test_an_allowlist_admits_the_endpoint_by_itself(creds, secrets, settings):
    secrets.values["OPENAI_API_KEY"] = OPENAI_KEY
    settings.set("defaults.network", "allowlist")
    settings.set("defaults.allow", "pypi.org:443")
    assert status(creds, "codex", settings).ok
    settings.set("engines.codex.base_url", "http://127.0.0.1:8080/v1")
    st = status(creds, "codex", settings)
    assert st.ok and st.endpoint_entry == "127.0.0.1:8080"


def test_a_missing_binary_offers_install_and_choose(creds, secrets, settings, monkeypatch):
    secrets.values["OPENAI_API_KEY"] = OPENAI_KEY
    monkeypatch.setattr(
        signin,
        "find_engine",
        lambda name, s, **_: Found(name, None, None, None, "PATH", "no codex on PATH"),
    )
    st = status(creds, "codex", settings)
    (problem,) = st.issues
    assert problem.what == "no codex on PATH"
    assert problem.action == ACTION_CHOOSE_BINARY
    assert problem.command == "npm install -g @openai/codex@latest"
    assert st.to_dict()["found"] is False and st.to_dict()["path"] is None


def test_the_shell_engine_needs_nothing(creds, secrets, settings):
    secrets.fail = KeyringLocked("locked")  # never asked
    st = status(creds, "shell", settings)
    assert st.ok and st.signed_in is None and st.endpoint is None


def test_facts_name_the_path_version_and_sign_in(creds, secrets, settings):
    secrets.values["ANTHROPIC_API_KEY"] = ANTHROPIC_KEY
    lines = signin.facts(status(creds, "claude-code", settings))
    assert lines[0] == "Found /usr/local/bin/claude-code (version 2.1.197, from PATH)"
    assert lines[1] == "Signed in with Anthropic API key (keyring: ANTHROPIC_API_KEY)"
    assert lines[2].startswith("Model endpoint https://api.anthropic.com allowed")
