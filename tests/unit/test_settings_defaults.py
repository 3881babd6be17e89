"""The settings' defaults (engine, image, network, allow, backend) are validated, stored, and
applied to new tasks and sandboxes; the data folder's risk rules replace Cairn's own, are
validated before anything is written, and apply to the judge's next request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from core import approvals
from core.app import Cairn
from core.approvals import RULES_FILE, classify, rules_for
from core.errors import CairnError, InputError
from core.policy import Policy
from core.settings import (
    DEFAULT_KEYS,
    default_policy,
    get_setting,
    read_defaults,
    set_setting,
    settings_path,
    unset_setting,
)


@pytest.fixture
def app(tmp_path: Path):
    with Cairn(tmp_path / "data") as cairn:
        yield cairn


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    (path / "README.md").write_text("# demo\n")
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], cwd=path, check=True)
    return path


def stored(app: Cairn) -> dict:
    path = settings_path(app.data.root)
    return json.loads(path.read_text()) if path.exists() else {}


# -- keys and values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,value,expected",
    [
        ("defaults.engine", "codex", "codex"),
        ("defaults.engine", " shell ", "shell"),
        ("defaults.image", "cairn-sandbox:1", "cairn-sandbox:1"),
        (
            "defaults.image",
            "registry.example.com:5000/team/sandbox:v2.1",
            "registry.example.com:5000/team/sandbox:v2.1",
        ),
        ("defaults.image", "ghcr.io/x/y@sha256:" + "a" * 64, "ghcr.io/x/y@sha256:" + "a" * 64),
        ("defaults.network", "allowlist", "allowlist"),
        ("defaults.network", "open", "open"),
        ("defaults.allow", "api.example.com:443", "api.example.com:443"),
        (
            "defaults.allow",
            "API.example.com:443, 127.0.0.1:11434,api.example.com:443",
            "api.example.com:443,127.0.0.1:11434",
        ),
        ("defaults.allow", "[::1]:8080", "[::1]:8080"),
        ("defaults.backend", "host", "host"),
        ("defaults.backend", "docker", "docker"),
    ],
)
def test_each_default_takes_a_good_value_and_stores_it_normalised(app, key, value, expected):
    assert app.settings.set(key, value) == expected
    assert app.settings.get(key) == expected
    assert stored(app)["defaults"][key.split(".")[1]] == expected


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("defaults.engine", "gemini", "unknown engine 'gemini'"),
        ("defaults.image", "Cairn Sandbox", "Docker image reference"),
        ("defaults.image", "cairn-sandbox:", "Docker image reference"),
        ("defaults.image", "a\nb", "one line"),
        ("defaults.network", "internet", "unknown network mode 'internet'"),
        ("defaults.allow", "example.com", "'example.com' is not a usable host:port"),
        ("defaults.allow", "api.example.com:443,example.com:99999", "'example.com:99999'"),
        ("defaults.allow", "0.0.0.0:80", "'0.0.0.0:80'"),
        ("defaults.allow", " , ", "at least one host:port"),
        ("defaults.backend", "podman", "unknown sandbox backend 'podman'"),
        ("defaults.engine", "", "needs a value"),
        ("defaults.colour", "blue", "unknown default 'colour'"),
        ("defaults.engine.x", "shell", "not a settings key"),
        ("colour", "blue", "not a settings key"),
    ],
)
def test_a_bad_default_is_refused_with_one_line_and_nothing_written(app, key, value, message):
    with pytest.raises(InputError, match=message) as caught:
        app.settings.set(key, value)
    assert "\n" not in str(caught.value)
    assert not settings_path(app.data.root).exists()


def test_an_unknown_default_names_the_known_keys(app):
    with pytest.raises(InputError) as caught:
        app.settings.set("defaults.colour", "blue")
    assert all(name in str(caught.value) for name in DEFAULT_KEYS)


def test_engine_settings_work_as_before_beside_the_defaults(app):
    app.settings.set("engines.codex.model", "gpt-5.5")
    app.settings.set("defaults.engine", "codex")
    assert stored(app) == {
        "engines": {"codex": {"model": "gpt-5.5"}},
        "defaults": {"engine": "codex"},
    }
    assert app.settings.get("engines.codex") == {"model": "gpt-5.5"}
    assert app.settings.get("defaults") == {"engine": "codex"}
    with pytest.raises(InputError, match="unknown engine setting 'temperature'"):
        app.settings.set("engines.codex.temperature", "1")


def test_defaults_persist_across_facades_and_unset_removes_them(tmp_path):
    with Cairn(tmp_path / "data") as first:
        first.settings.set("defaults.network", "allowlist")
        first.settings.set("defaults.allow", "api.example.com:443")
    with Cairn(tmp_path / "data") as second:
        assert second.settings.defaults() == {
            "network": "allowlist",
            "allow": "api.example.com:443",
        }
        assert second.settings.unset("defaults.network") is True
        assert second.settings.unset("defaults.network") is False
        assert second.settings.unset("defaults.allow") is True
        assert second.settings.get("defaults") == {}
        assert "defaults" not in stored(second)


def test_a_hand_edited_unusable_default_is_named_with_the_file(tmp_path):
    path = settings_path(tmp_path)
    path.write_text(json.dumps({"defaults": {"network": "everywhere"}}))
    with pytest.raises(CairnError, match="defaults.network"):
        read_defaults(path)
    path.write_text(json.dumps({"defaults": {"network": "open", "future": "x"}}))
    assert read_defaults(path) == {"network": "open"}


def test_the_module_functions_agree_with_the_facade(tmp_path):
    path = settings_path(tmp_path)
    set_setting(path, "defaults.backend", "host")
    assert get_setting(path, "defaults.backend") == "host"
    assert unset_setting(path, "defaults.backend")
    assert get_setting(path, "defaults.backend") is None


def test_default_policy_comes_from_network_and_allow():
    assert default_policy({}) == Policy()
    policy = default_policy({"network": "allowlist", "allow": "a.example:443,b.example:80"})
    assert (policy.network, policy.allow) == ("allowlist", ("a.example:443", "b.example:80"))


# -- new tasks -------------------------------------------------------------------------------------


def test_a_new_task_without_an_engine_is_a_shell_task(app, repo):
    made = app.tasks.new(repo, title="plain")
    assert made.task.engine == "shell"
    assert Policy.from_dict(made.workspace.policy) == Policy()


def test_a_new_task_takes_the_default_engine_and_network(app, repo):
    app.settings.set("defaults.engine", "codex")
    app.settings.set("defaults.network", "allowlist")
    app.settings.set("defaults.allow", "api.example.com:443")
    made = app.tasks.new(repo, title="with defaults")
    assert made.task.engine == "codex"
    policy = app.tasks.policy_of(made.workspace)
    assert (policy.network, policy.allow) == ("allowlist", ("api.example.com:443",))


def test_what_the_caller_chose_wins_over_the_defaults(app, repo):
    app.settings.set("defaults.engine", "codex")
    app.settings.set("defaults.network", "open")
    made = app.tasks.new(repo, title="explicit", engine="shell", policy=Policy(network="none"))
    assert made.task.engine == "shell"
    assert app.tasks.policy_of(made.workspace).network == "none"


# -- sandbox backend and image ---------------------------------------------------------------------


def test_the_backend_is_docker_unless_a_setting_or_the_environment_says_host(app, monkeypatch):
    from core.sandbox.docker import DockerBackend
    from core.sandbox.host import HostBackend

    monkeypatch.delenv("CAIRN_BACKEND", raising=False)
    assert isinstance(app.sandboxes.backend, DockerBackend)
    app.settings.set("defaults.backend", "host")  # what the first-run check does without Docker
    assert isinstance(app.sandboxes.backend, HostBackend)
    monkeypatch.setenv("CAIRN_BACKEND", "docker")
    app.reset_sandboxes()
    assert isinstance(app.sandboxes.backend, DockerBackend)  # the environment wins
    monkeypatch.delenv("CAIRN_BACKEND")
    app.settings.unset("defaults.backend")
    assert isinstance(app.sandboxes.backend, DockerBackend)


def test_reset_sandboxes_picks_up_a_setting_another_process_wrote(app, monkeypatch):
    from core.sandbox.host import HostBackend

    monkeypatch.delenv("CAIRN_BACKEND", raising=False)
    first = app.sandboxes
    set_setting(settings_path(app.data.root), "defaults.backend", "host")
    assert app.sandboxes is first  # cached until reset
    app.reset_sandboxes()
    assert isinstance(app.sandboxes.backend, HostBackend)


def test_the_image_comes_from_the_constructor_then_the_environment_then_the_setting(
    tmp_path, monkeypatch
):
    from core.sandbox.base import DEFAULT_IMAGE

    monkeypatch.setenv("CAIRN_BACKEND", "host")
    monkeypatch.delenv("CAIRN_SANDBOX_IMAGE", raising=False)
    with Cairn(tmp_path / "data") as app:
        assert app.sandboxes.image == DEFAULT_IMAGE
        app.settings.set("defaults.image", "my-sandbox:3")
        assert app.sandboxes.image == "my-sandbox:3"
        monkeypatch.setenv("CAIRN_SANDBOX_IMAGE", "from-env:1")
        app.reset_sandboxes()
        assert app.sandboxes.image == "from-env:1"
    with Cairn(tmp_path / "data", image="given:2") as app:
        assert app.sandboxes.image == "given:2"


# -- risk rules ------------------------------------------------------------------------------------

OVERRIDE = {
    "version": 7,
    "rules": [{"id": "make-deploy", "pattern": r"\bmake\s+deploy\b", "reason": "deploys"}],
}


def test_the_bundled_rules_apply_until_the_user_overrides_them(app):
    shown = app.approvals.risk_rules()
    assert shown["user"] is False and shown["problem"] is None
    assert shown["text"] == RULES_FILE.read_text()
    assert {r["id"] for r in shown["rules"]} >= {"git-push", "pipe-to-shell"}
    assert rules_for(app.data.root).version == shown["version"]


def test_an_override_replaces_the_rules_the_judge_matches_with(app):
    judge = app.approvals.with_options()
    open_net = Policy(network="open")
    assert classify("git push origin main", open_net, judge.rules).rule_id == "git-push"
    assert not classify("make deploy", open_net, judge.rules).needs_approval

    shown = app.approvals.set_risk_rules(json.dumps(OVERRIDE, indent=2))
    assert shown["user"] is True and shown["version"] == 7
    assert [r["id"] for r in shown["rules"]] == ["make-deploy"]
    assert (app.data.root / "risk-rules.json").is_file()
    # The running judge picks the change up at its next judgement.
    assert classify("make deploy", open_net, judge.rules).rule_id == "make-deploy"
    assert not classify("git push origin main", open_net, judge.rules).needs_approval
    assert app.approvals.rules.version == 7

    assert app.approvals.reset_risk_rules() is True
    assert app.approvals.reset_risk_rules() is False
    assert app.approvals.risk_rules()["user"] is False
    assert classify("git push origin main", open_net, judge.rules).rule_id == "git-push"


def test_a_second_override_applies_at_once(app):
    judge = app.approvals
    app.approvals.set_risk_rules(json.dumps(OVERRIDE))
    again = {"version": 8, "rules": [{"id": "ls", "pattern": "^ls$", "reason": "lists"}]}
    app.approvals.set_risk_rules(json.dumps(again))
    assert judge.rules.version == 8
    assert classify("ls", Policy(), judge.rules).rule_id == "ls"


@pytest.mark.parametrize(
    "text,message",
    [
        ("{not json", "not JSON"),
        (
            json.dumps({"version": 1, "rules": [{"id": "broken", "pattern": "(", "reason": "r"}]}),
            "rule 'broken': the pattern is not a usable regular expression",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "rules": [
                        {"id": "x", "pattern": "a", "reason": "r", "when": {"netwrk": "none"}}
                    ],
                }
            ),
            "rule 'x'.*netwrk",
        ),
        (
            json.dumps({"version": 1, "rules": [{"id": "x", "pattern": "a"}]}),
            "rule 'x' needs a 'reason'",
        ),
        (
            json.dumps({"version": 1, "rules": [{"pattern": "a", "reason": "r"}]}),
            "rule 1 needs an 'id'",
        ),
        (
            json.dumps(
                {"version": 1, "rules": [{"id": "x", "pattern": "a", "reason": "r", "severity": 3}]}
            ),
            "rule 'x' has unknown fields severity",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "rules": [
                        {"id": "x", "pattern": "a", "reason": "r"},
                        {"id": "x", "pattern": "b", "reason": "r"},
                    ],
                }
            ),
            "share the id 'x'",
        ),
        (json.dumps({"rules": []}), "integer 'version'"),
        (json.dumps([1, 2]), "JSON object"),
    ],
)
def test_a_bad_rules_file_is_refused_with_one_line_and_nothing_written(app, text, message):
    with pytest.raises(InputError, match=message) as caught:
        app.approvals.set_risk_rules(text)
    assert "\n" not in str(caught.value)
    assert not approvals.user_rules_path(app.data.root).exists()
    assert list(app.data.root.glob(".risk-rules.json.*")) == []
    assert app.approvals.risk_rules()["user"] is False


def test_a_bad_text_leaves_an_earlier_override_as_it_was(app):
    app.approvals.set_risk_rules(json.dumps(OVERRIDE))
    before = approvals.user_rules_path(app.data.root).read_text()
    with pytest.raises(InputError):
        app.approvals.set_risk_rules(
            '{"version": 1, "rules": [{"id": "y", "pattern": "[", "reason": "r"}]}'
        )
    assert approvals.user_rules_path(app.data.root).read_text() == before
    assert app.approvals.rules.version == 7


def test_a_hand_broken_override_is_reported_not_ignored(app):
    approvals.user_rules_path(app.data.root).write_text('{"version": 1, "rules": [')
    shown = app.approvals.risk_rules()
    assert shown["user"] is True and "not JSON" in shown["problem"] and shown["rules"] == []
    with pytest.raises(CairnError, match="risk-rules.json"):
        _ = app.approvals.with_options().rules


def test_checking_writes_nothing(app):
    assert app.settings.check("defaults.allow", "A.example:443") == "a.example:443"
    with pytest.raises(InputError, match="not a usable host:port"):
        app.settings.check("defaults.allow", "nope")
    assert [r["id"] for r in app.approvals.check_risk_rules(json.dumps(OVERRIDE))] == [
        "make-deploy"
    ]
    with pytest.raises(InputError, match="rule 'b'"):
        app.approvals.check_risk_rules(
            '{"version": 1, "rules": [{"id": "b", "pattern": "(", "reason": "r"}]}'
        )
    assert not settings_path(app.data.root).exists()
    assert not approvals.user_rules_path(app.data.root).exists()


# -- the network an agent needs ----------------------------------------------------------------------


def test_a_new_agent_task_may_reach_its_model_endpoint_and_nothing_else(app, repo):
    made = app.tasks.new(repo, title="agent", engine="claude-code")
    policy = app.tasks.policy_of(made.workspace)
    assert (policy.network, policy.allow) == ("allowlist", ("api.anthropic.com:443",))
    app.settings.set("engines.codex.base_url", "http://127.0.0.1:8123/v1")
    codex = app.tasks.policy_of(app.tasks.new(repo, title="codex", engine="codex").workspace)
    assert (codex.network, codex.allow) == ("allowlist", ("127.0.0.1:8123",))


def test_a_new_shell_task_keeps_no_network(app, repo):
    made = app.tasks.new(repo, title="shell", engine="shell")
    assert app.tasks.policy_of(made.workspace).network == "none"


@pytest.mark.parametrize("where", ["argument", "defaults"])
def test_an_agent_task_that_could_not_reach_its_model_is_refused_before_anything_is_made(
    app, repo, where
):
    kwargs = {}
    if where == "argument":
        kwargs["policy"] = Policy(network="none")
    else:
        app.settings.set("defaults.network", "none")
    with pytest.raises(InputError, match="cannot reach its model at api.anthropic.com:443") as e:
        app.tasks.new(repo, title="offline agent", engine="claude-code", **kwargs)
    assert "allowlist" in str(e.value)
    assert app.tasks.all() == []
    assert app.ctx.store.query("SELECT * FROM sources") == []
