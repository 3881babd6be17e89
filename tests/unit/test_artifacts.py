"""Artifacts, the secret scan that refuses a hit, the content-addressed store that re-hashes on
every read, and engine settings (the file, its validation, the endpoint the allowlist admits)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from core import settings as cfg
from core.app import Cairn
from core.artifacts import (
    ArtifactStore,
    CorruptArtifact,
    ScanUnavailable,
    SecretFound,
    SecretScanner,
    list_tree,
    write_tar,
)
from core.credentials import KeyringUnavailable, SecretMissing
from core.errors import CairnError, InputError, NotFound
from core.policy import Policy

SECRET = "s3cr3t-Value-for-the-scan-0123456789"
# Token-shaped strings put together at run time, so this file holds none of them whole.
GITHUB = "ghp" + "_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS = "AKIA" + "Q7XR2M4K9PLZ3WNB"
OPENAI = "sk-" + "proj-" + "x8Jf2kLq9Zr4Tn7Wv1Bc6Hd3Mg5Ps0Ya"
PRIVATE_KEY = "-----BEGIN " + "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"


class FakeSecrets:
    """Stands in for SecretStore: values by name, or a keyring that cannot be reached."""

    def __init__(self, values: dict[str, str] | None = None, *, unavailable: bool = False):
        self.values = dict(values or {})
        self.unavailable = unavailable
        self.asked: list[str] = []

    def get(self, name: str) -> str:
        self.asked.append(name)
        if self.unavailable:
            raise KeyringUnavailable("no OS keyring backend found (no D-Bus session)")
        if name not in self.values:
            raise SecretMissing(name)
        return self.values[name]


def make_app(tmp_path: Path, secrets: FakeSecrets | None = None) -> tuple[Cairn, str, Path]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo\n")
    (project / "src").mkdir()
    (project / "src" / "app.py").write_text("print('hello')\n")
    app = Cairn(tmp_path / "data", secrets=secrets or FakeSecrets())
    made = app.tasks.new(project, title="demo")
    return app, made.task.id, Path(made.workspace.root)


def edit(app: Cairn, task_id: str, root: Path, rel: str, text: str | bytes) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    rev, _ = app.revisions.capture(task_id)
    return rev.id


@pytest.fixture
def fake() -> FakeSecrets:
    return FakeSecrets({"api": SECRET})


@pytest.fixture
def setup(tmp_path, fake):
    app, task_id, root = make_app(tmp_path, fake)
    yield app, task_id, root
    app.close()


# -- the scanner ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,kind",
    [
        (f"token = '{GITHUB}'\n", "GitHub token"),
        (f"aws_access_key_id={AWS}\n", "AWS access key id"),
        (f"OPENAI_API_KEY={OPENAI}\n", "OpenAI-style API key"),
        (PRIVATE_KEY, "private key"),
        ("-----BEGIN RSA " + "PRIVATE KEY-----\n", "private key"),
        (
            "key: " + "sk-ant-" + "api03-" + "Zq8Xr2Lm4Kp9Tn7Wv1Bc6Hd3Mg5Ps0Ya\n",
            "Anthropic API key",
        ),
        ("xoxb-" + "123456789012-abcdefGHIJKL\n", "Slack token"),
    ],
)
def test_token_shapes_are_found_and_named_by_kind(text, kind):
    hits = SecretScanner().scan("conf/x.env", ("line one\n" + text).encode())
    assert [(h.path, h.kind, h.line) for h in hits] == [("conf/x.env", kind, 2)]


@pytest.mark.parametrize(
    "text",
    [
        "import sklearn  # sk-learn\n",
        "ghp_test\n",
        "AKIA\n",
        "the sk-ant is small\n",
        "-----BEGIN PUBLIC KEY-----\n",
        "sk-this-is-a-very-long-css-class-name-without-digits\n",
    ],
)
def test_ordinary_text_is_not_a_token(text):
    assert SecretScanner().scan("a.txt", text.encode()) == []


def test_a_granted_value_is_found_as_is_and_encoded_and_never_shown():
    scanner = SecretScanner({"api": SECRET, "pin": "12"})
    assert scanner.too_short == ["pin"] and scanner.secret_names == ["api"]
    for data in (SECRET.encode(), base64.b64encode(SECRET.encode()), f"url?key={SECRET}".encode()):
        (hit,) = scanner.scan("f", b"x\n" + data)
        assert hit.kind == "the granted secret 'api'" and hit.line == 2
    error = SecretFound("Promoting", scanner.scan("out/log.txt", SECRET.encode()))
    assert "out/log.txt" in str(error) and "'api'" in str(error) and SECRET not in str(error)


def test_a_secret_in_a_file_name_is_found():
    (hit,) = SecretScanner({"api": SECRET}).scan_name(f"dump/{SECRET}.txt")
    assert hit.in_name and "in the file name" in hit.describe()


# -- the artifact store ---------------------------------------------------------------------------


def test_store_round_trip_dedup_and_tamper(tmp_path):
    store = ArtifactStore(tmp_path / "artifacts")
    sha, size = store.put_bytes(b"hello")
    assert sha == hashlib.sha256(b"hello").hexdigest() and size == 5
    path = store.path_for(sha)
    assert path == tmp_path / "artifacts" / "sha256" / sha[:2] / sha[2:]
    assert store.read(sha, label="artifact a") == b"hello"
    assert store.put_bytes(b"hello") == (sha, 5)
    assert not list((tmp_path / "artifacts" / "tmp").iterdir())
    path.chmod(0o644)
    path.write_bytes(b"hellO")
    with pytest.raises(CorruptArtifact, match="artifact a is corrupt: .* not the recorded"):
        store.read(sha, label="artifact a")
    with pytest.raises(CorruptArtifact, match="corrupt"):
        store.verify(sha, label="artifact a")
    store.put_bytes(b"hello")  # the same content promoted again repairs the copy
    assert store.read(sha, label="artifact a") == b"hello"
    path.unlink()
    with pytest.raises(CorruptArtifact, match="missing"):
        store.read(sha, label="artifact a")


# -- promotion through the facade -----------------------------------------------------------------


def test_artifact_of_a_file_round_trip_with_provenance_and_evidence(setup):
    app, task_id, root = setup
    rev = edit(app, task_id, root, "src/app.py", "print('better')\n")
    art = app.artifacts.promote(
        task_id, path="./src/app.py", evidence=b"3 passed\n", evidence_name="pytest.txt"
    )
    assert art.kind == "file" and art.path == "src/app.py" and art.revision_id == rev
    assert art.sha256 == hashlib.sha256(b"print('better')\n").hexdigest()
    assert app.artifacts.read(art.id) == b"print('better')\n"
    p = app.artifacts.get(art.id[:8]).provenance
    assert p["task_id"] == task_id and p["revision"] == rev and p["engine"] == "shell"
    assert p["evidence"]["name"] == "pytest.txt"
    assert p["evidence"]["sha256"] == hashlib.sha256(b"3 passed\n").hexdigest()
    assert p["scan"]["secrets_checked"] == [] and p["scan"]["files_scanned"] == 1
    assert app.artifacts.read_evidence(art.id) == b"3 passed\n"
    assert [a.id for a in app.artifacts.all()] == [art.id]
    assert [a.id for a in app.artifacts.all(task_id)] == [art.id]


def test_a_whole_revision_is_a_deterministic_tar(setup):
    app, task_id, root = setup
    edit(app, task_id, root, "bin/run.sh", "#!/bin/sh\necho hi\n")
    (root / "bin" / "run.sh").chmod(0o755)
    (root / "link").symlink_to("README.md")
    app.revisions.capture(task_id)
    first = app.artifacts.promote(task_id)
    second = app.artifacts.promote(task_id)
    assert first.id != second.id and first.sha256 == second.sha256
    data = app.artifacts.read(first.id)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"README.md", "bin", "bin/run.sh", "link", "src", "src/app.py"}
        assert members["bin/run.sh"].mode == 0o755 and members["README.md"].mode == 0o644
        assert members["link"].issym() and members["link"].linkname == "README.md"
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in members.values())
        assert tar.extractfile("src/app.py").read() == b"print('hello')\n"
    ws = app.tasks.workspace_of(app.tasks.get(task_id))
    vault = app.ctx.vault_for(ws.source_id)
    rev = app.revisions.resolve(app.tasks.get(task_id), None)
    out = io.BytesIO()
    write_tar(vault, list_tree(vault, rev.id, with_trees=True), out)
    assert hashlib.sha256(out.getvalue()).hexdigest() == first.sha256


def test_a_granted_secret_in_a_file_refuses_and_names_the_file(setup, fake):
    app, task_id, root = setup
    app.credentials.grant(task_id, "api", "API_KEY")
    edit(app, task_id, root, "notes/debug.txt", f"the key was {SECRET}\n")
    for promote in (
        lambda: app.artifacts.promote(task_id),
        lambda: app.artifacts.promote(task_id, path="notes/debug.txt"),
        lambda: app.artifacts.export_patch(task_id),
    ):
        with pytest.raises(SecretFound) as info:
            promote()
        message = str(info.value)
        assert "notes/debug.txt" in message and "the granted secret 'api'" in message
        assert SECRET not in message
    assert app.artifacts.all() == []
    assert not (app.data.artifacts_root / "sha256").exists()


def test_a_revoked_grant_is_still_scanned_for(setup):
    app, task_id, root = setup
    app.credentials.grant(task_id, "api", "API_KEY")
    app.credentials.revoke(task_id, "api")
    edit(app, task_id, root, "leak.txt", SECRET)
    with pytest.raises(SecretFound, match="leak.txt"):
        app.artifacts.promote(task_id)


def test_token_shapes_refuse_a_promotion(setup):
    app, task_id, root = setup
    edit(app, task_id, root, "config/settings.py", f"GITHUB = '{GITHUB}'\nAWS = '{AWS}'\n")
    with pytest.raises(SecretFound) as info:
        app.artifacts.promote(task_id, path="config/settings.py")
    assert "GitHub token, line 1" in str(info.value) and "AWS access key id, line 2" in str(
        info.value
    )
    assert GITHUB not in str(info.value) and AWS not in str(info.value)


def test_evidence_is_scanned_too(setup):
    app, task_id, root = setup
    with pytest.raises(SecretFound, match="the evidence out.txt"):
        app.artifacts.promote(
            task_id, evidence=f"env: {OPENAI}\n".encode(), evidence_name="out.txt"
        )


def test_no_keyring_refuses_when_the_lineage_has_grants(tmp_path):
    secrets = FakeSecrets(unavailable=True)
    app, task_id, root = make_app(tmp_path, secrets)
    try:
        edit(app, task_id, root, "a.txt", "fine\n")
        art = app.artifacts.promote(task_id)  # no grants: the keyring is never asked
        assert secrets.asked == [] and art.provenance["scan"]["secrets_checked"] == []
        app.credentials.grant(task_id, "api", "API_KEY")
        with pytest.raises(ScanUnavailable) as info:
            app.artifacts.promote(task_id)
        assert "'api'" in str(info.value) and "no OS keyring backend" in str(info.value)
        assert "\n" not in str(info.value)
        assert len(app.artifacts.all()) == 1
    finally:
        app.close()


def test_a_secret_gone_from_the_keyring_is_reported_not_blocking(tmp_path):
    app, task_id, root = make_app(tmp_path, FakeSecrets({}))
    try:
        app.credentials.grant(task_id, "old", "OLD_KEY")
        art = app.artifacts.promote(task_id)
        assert art.provenance["scan"]["secrets_not_in_keyring"] == ["old"]
    finally:
        app.close()


def test_bad_paths_and_plain_folders(setup):
    app, task_id, root = setup
    with pytest.raises(InputError, match="not a path inside"):
        app.artifacts.promote(task_id, path="../etc/passwd")
    with pytest.raises(InputError, match="is a folder"):
        app.artifacts.promote(task_id, path="src")
    with pytest.raises(NotFound, match="has no file nope.txt"):
        app.artifacts.promote(task_id, path="nope.txt")
    with pytest.raises(InputError, match="plain folder, not a git repository"):
        app.artifacts.promote_to_branch(task_id, "cairn/out")
    with pytest.raises(InputError, match="no git HEAD"):
        app.artifacts.export_patch(task_id, since="head")
    with pytest.raises(NotFound):
        app.artifacts.read("art_nothing")


def test_a_workspace_started_from_a_later_revision_finds_the_import(setup):
    """A fork or a restored workspace has a revision as its base; patches and scans still start
    from the folder as it was imported."""
    from dataclasses import replace

    from core.artifacts import head_at_import, import_base

    app, task_id, root = setup
    ws = app.tasks.workspace_of(app.tasks.get(task_id))
    later = edit(app, task_id, root, "a.txt", "1\n")
    edit(app, task_id, root, "a.txt", "2\n")
    vault = app.ctx.vault_for(ws.source_id)
    forked = replace(ws, base_revision=later)
    assert import_base(vault, forked) == import_base(vault, ws) == ws.base_revision
    assert head_at_import(vault, forked) is None  # a plain folder has no HEAD


def test_tampering_is_a_clear_error_on_read(setup):
    app, task_id, root = setup
    art = app.artifacts.promote(task_id, path="README.md")
    stored = app.data.artifacts_root / "sha256" / art.sha256[:2] / art.sha256[2:]
    stored.chmod(0o644)
    stored.write_bytes(b"# changed\n")
    with pytest.raises(CorruptArtifact) as info:
        app.artifacts.read(art.id)
    assert f"artifact {art.id} is corrupt" in str(info.value)
    assert isinstance(info.value, CairnError)


# -- settings -------------------------------------------------------------------------------------


def test_settings_round_trip_keeps_other_entries(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"approvals": {"timeout": 60}, "engines": {"shell": {"x": 1}}}))
    assert cfg.set_setting(path, "engines.codex.model", " gpt-5-codex ") == "gpt-5-codex"
    cfg.set_setting(path, "engines.claude-code.base_url", "https://api.example.com/v1")
    cfg.set_setting(path, "engines.codex.api_key_secret", "openai")
    assert cfg.get_setting(path, "engines.codex.model") == "gpt-5-codex"
    assert cfg.get_setting(path, "engines.codex") == {
        "model": "gpt-5-codex",
        "api_key_secret": "openai",
    }
    assert cfg.get_setting(path, "engines.shell.model") is None
    data = json.loads(path.read_text())
    assert data["approvals"] == {"timeout": 60} and data["engines"]["shell"] == {"x": 1}
    assert cfg.unset_setting(path, "engines.codex.model") is True
    assert cfg.unset_setting(path, "engines.codex.model") is False
    assert not list(tmp_path.glob(".settings.json.*.tmp"))


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("engines.nope.model", "x", "unknown engine 'nope'"),
        ("engines.codex.colour", "x", "unknown engine setting 'colour'"),
        ("engine.codex.model", "x", "not a settings key"),
        ("engines.codex", "x", "not a settings key"),
        ("engines.codex.binary", "codex", "absolute path"),
        ("engines.codex.base_url", "ftp://x", "http:// or https://"),
        ("engines.codex.base_url", "https://user:pw@api.example.com", "user name or password"),
        ("engines.codex.api_key_secret", "not a name!", "not a valid secret name"),
        ("engines.codex.model", "two\nlines", "one line"),
        ("engines.codex.model", "  ", "needs a value"),
    ],
)
def test_settings_validation_is_one_line(tmp_path, key, value, message):
    with pytest.raises(InputError, match=message) as info:
        cfg.set_setting(tmp_path / "settings.json", key, value)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "settings.json").exists()


def test_an_unreadable_settings_file_is_reported(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json")
    with pytest.raises(CairnError, match="cannot be read"):
        cfg.set_setting(path, "engines.codex.model", "m")
    assert path.read_text() == "{not json"


@pytest.mark.parametrize(
    "url,entry",
    [
        ("https://API.Example.com/v1", "api.example.com:443"),
        ("http://localhost:11434", "localhost:11434"),
        ("http://127.0.0.1/", "127.0.0.1:80"),
        ("https://[::1]:8443/v1", "[::1]:8443"),
    ],
)
def test_endpoint_allow_entry(url, entry):
    assert cfg.endpoint_allow_entry({"base_url": url}) == entry


def test_the_allowlist_admits_the_engines_endpoint_without_a_new_version():
    from core.engines.base import EngineSettings

    settings = EngineSettings(base_url="https://api.example.com/v1")
    endpoint = cfg.endpoint_allow_entry(settings)
    assert cfg.endpoint_allow_entry(EngineSettings()) is None
    assert cfg.endpoint_allow_entry(None) is None
    closed = Policy()
    assert cfg.policy_with_endpoint(closed, endpoint) is closed
    listed = Policy().changed(network="allowlist", allow=["pypi.org:443"])
    admitted = cfg.policy_with_endpoint(listed, endpoint)
    assert admitted.allow == ("pypi.org:443", "api.example.com:443")
    assert admitted.version == listed.version
    assert cfg.policy_with_endpoint(admitted, endpoint) is admitted


def test_facade_settings_feed_engine_settings(tmp_path):
    with Cairn(tmp_path / "data", secrets=FakeSecrets()) as app:
        app.settings.set("engines.shell.model", "m1")
        assert app.settings.get("engines.shell.model") == "m1"
        assert app.settings.engine("shell").model == "m1"
