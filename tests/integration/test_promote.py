"""Results leave the sandbox only by promotion, against real git and real user repositories: a
new branch (the one write Cairn makes in the user's repository, and nothing else), an artifact
that re-hashes on every read, a patch `git apply` takes, and every refusal with one line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from core.app import Cairn
from core.artifacts import SecretFound
from core.credentials import INDEX_KEY, SecretMissing, SecretStore
from core.redact import Redactor
from tests.support import as_json, cairnctl, git, one_error_line

# Token-shaped text assembled at run time, so no file of the project holds one whole.
GITHUB = "ghp" + "_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9Oo8"
CANARY = f"canary-{uuid.uuid4().hex}"


def make_repo(path: Path, *, dirty: bool = True) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "me@example.com")
    git(path, "config", "user.name", "Me")
    (path / "README.md").write_text("# demo\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("def main():\n    print('hello')\n")
    (path / "src" / "util.py").write_text("X = 1\n")
    (path / ".gitignore").write_text("*.log\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    if dirty:
        (path / "src" / "util.py").write_text("X = 2  # uncommitted\n")
        (path / "notes.txt").write_text("untracked\n")
        (path / "debug.log").write_text("ignored\n")
    return path


def repo_state(repo: Path) -> dict:
    """Everything a promotion must leave alone, plus the refs (compared separately)."""
    dot = repo / ".git"
    return {
        "refs": git(repo, "for-each-ref", "--format=%(objectname) %(refname)"),
        "head": (dot / "HEAD").read_text(),
        "head_commit": git(repo, "rev-parse", "HEAD"),
        "index": hashlib.sha256((dot / "index").read_bytes()).hexdigest(),
        "config": (dot / "config").read_text(),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all", "--ignored"),
        "files": {
            p.relative_to(repo).as_posix(): p.read_bytes()
            for p in sorted(repo.rglob("*"))
            if p.is_file() and ".git" not in p.parts
        },
        "objects": git(repo, "count-objects", "-v"),
    }


def new_task(data: Path, repo: Path) -> dict:
    return as_json(cairnctl(data, "new", str(repo), "--title", "Fix the app", "--json"))


def write_and_capture(data: Path, task: dict, files: dict[str, str]) -> str:
    root = Path(task["workspace_root"])
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return as_json(cairnctl(data, "capture", task["task_id"], "--json"))["revision"]


def tree_of(data: Path, task_id: str, revision: str) -> str:
    revs = as_json(cairnctl(data, "revisions", task_id, "--json"))["revisions"]
    return next(r["tree"] for r in revs if r["id"] == revision)


@pytest.fixture
def world(tmp_path):
    data = tmp_path / "data"
    repo = make_repo(tmp_path / "repo")
    task = new_task(data, repo)
    rev = write_and_capture(
        data,
        task,
        {
            "src/app.py": "def main():\n    print('hello, world')\n",
            "tests/test_app.py": "def test_it():\n    pass\n",
        },
    )
    return data, repo, task, rev


# -- promote to a branch --------------------------------------------------------------------------


def test_promote_creates_exactly_one_branch_and_touches_nothing_else(world):
    data, repo, task, rev = world
    marker = repo.parent / "hook-ran"
    for hook in ("pre-receive", "post-receive", "reference-transaction", "post-update"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        path.chmod(0o755)
    before = repo_state(repo)
    out = as_json(cairnctl(data, "promote", task["task_id"], "--branch", "cairn/fix-app", "--json"))
    after = repo_state(repo)

    new_refs = set(after.pop("refs").splitlines()) - set(before.pop("refs").splitlines())
    assert new_refs == {f"{out['commit']} refs/heads/cairn/fix-app"}
    assert set(git(repo, "for-each-ref", "--format=%(refname)").split()) == {
        "refs/heads/main",
        "refs/heads/cairn/fix-app",
    }
    before.pop("objects"), after.pop("objects")  # new objects are expected
    assert after == before  # HEAD, index, config, status and the files themselves
    assert not marker.exists(), "the user's hooks must not run during a promotion"

    assert git(repo, "rev-parse", "cairn/fix-app^{tree}").strip() == tree_of(
        data, task["task_id"], rev
    )
    assert out["tree"] == tree_of(data, task["task_id"], rev)
    assert git(repo, "rev-parse", "cairn/fix-app^").strip() == before["head_commit"].strip()
    message = git(repo, "log", "-1", "--format=%B", "cairn/fix-app")
    assert message.startswith("Fix the app\n") and task["task_id"] in message
    git(repo, "fsck", "--no-progress")
    # The branch holds the base (uncommitted and untracked files included) plus the task's work.
    shown = git(repo, "show", "cairn/fix-app:src/util.py")
    assert shown == "X = 2  # uncommitted\n"
    assert "debug.log" not in git(repo, "ls-tree", "-r", "--name-only", "cairn/fix-app")


def test_an_existing_branch_is_refused_and_nothing_is_written(world):
    data, repo, task, _ = world
    git(repo, "branch", "taken")
    before = repo_state(repo)
    line = one_error_line(
        cairnctl(data, "promote", task["task_id"], "--branch", "taken", check=False)
    )
    assert "the branch taken already exists" in line
    assert repo_state(repo) == before
    line = one_error_line(
        cairnctl(data, "promote", task["task_id"], "--branch", "main", check=False)
    )
    assert "already exists" in line
    assert repo_state(repo) == before


def test_a_branch_beside_a_folder_of_branches_is_refused_before_any_object_is_sent(world):
    data, repo, task, _ = world
    git(repo, "branch", "feature")
    git(repo, "branch", "topic/one")
    before = repo_state(repo)
    line = one_error_line(
        cairnctl(data, "promote", task["task_id"], "--branch", "feature/x", check=False)
    )
    assert "the branch feature exists" in line
    line = one_error_line(
        cairnctl(data, "promote", task["task_id"], "--branch", "topic", check=False)
    )
    assert "branches named topic/... exist" in line
    assert repo_state(repo) == before


def test_bad_branch_names_are_refused(world):
    data, repo, task, _ = world
    before = repo_state(repo)
    for name in ("bad..name", "-x", "has space", "HEAD"):
        line = one_error_line(
            cairnctl(data, "promote", task["task_id"], f"--branch={name}", check=False)
        )
        assert "branch name" in line, line
    assert repo_state(repo) == before


def test_a_plain_folder_cannot_be_promoted_to_a_branch(tmp_path):
    data = tmp_path / "data"
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    task = new_task(data, folder)
    line = one_error_line(cairnctl(data, "promote", task["task_id"], "--branch", "x", check=False))
    assert "plain folder, not a git repository" in line
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]
    # ... while an artifact and a patch still work for it.
    art = as_json(cairnctl(data, "promote", task["task_id"], "--artifact", "--json"))
    assert art["kind"] == "revision"


def test_token_shaped_strings_refuse_every_way_out(world):
    data, repo, task, _ = world
    write_and_capture(data, task, {"config/deploy.py": f"TOKEN = '{GITHUB}'\n"})
    before = repo_state(repo)
    for args in (
        ["promote", task["task_id"], "--branch", "cairn/leak"],
        ["promote", task["task_id"], "--artifact"],
        ["promote", task["task_id"], "--artifact", "--path", "config/deploy.py"],
        ["export", task["task_id"]],
    ):
        proc = cairnctl(data, *args, check=False)
        line = one_error_line(proc)
        assert "config/deploy.py (GitHub token, line 1)" in line, line
        assert GITHUB not in proc.stdout + proc.stderr
    assert repo_state(repo) == before
    assert as_json(cairnctl(data, "artifacts", "--json"))["artifacts"] == []
    # Promoting an earlier revision, before the token was written, is fine.
    assert (
        as_json(
            cairnctl(data, "promote", task["task_id"], "--artifact", "--revision", "base", "--json")
        )["kind"]
        == "revision"
    )


def test_a_committed_example_key_of_the_user_does_not_block(tmp_path):
    data = tmp_path / "data"
    repo = make_repo(tmp_path / "repo", dirty=False)
    (repo / "docs.md").write_text(f"Example: {GITHUB}\n")
    git(repo, "add", "docs.md")
    git(repo, "commit", "-qm", "docs")
    task = new_task(data, repo)
    write_and_capture(data, task, {"src/new.py": "Y = 1\n"})
    art = as_json(cairnctl(data, "promote", task["task_id"], "--artifact", "--json"))
    assert art["provenance"]["scan"]["files_already_committed"] >= 1
    as_json(cairnctl(data, "promote", task["task_id"], "--branch", "cairn/ok", "--json"))


# -- artifacts ------------------------------------------------------------------------------------


def test_artifact_round_trip_then_tampering_is_caught_on_read(world, tmp_path):
    data, repo, task, rev = world
    evidence = tmp_path / "pytest-output.txt"
    evidence.write_text("1 passed in 0.01s\n")
    art = as_json(
        cairnctl(
            data,
            "promote",
            task["task_id"],
            "--artifact",
            "--path",
            "src/app.py",
            "--evidence",
            str(evidence),
            "--json",
        )
    )
    expected = b"def main():\n    print('hello, world')\n"
    assert art["sha256"] == hashlib.sha256(expected).hexdigest()
    assert art["revision"] == rev and art["path"] == "src/app.py"
    p = art["provenance"]
    assert p["task_id"] == task["task_id"] and p["engine"] == "shell" and p["tree"]
    assert p["evidence"]["name"] == "pytest-output.txt" and p["promoted_at"] > 0
    whole = as_json(cairnctl(data, "promote", task["task_id"], "--artifact", "--json"))

    listed = as_json(cairnctl(data, "artifacts", "--verify", "--json"))["artifacts"]
    assert [(a["artifact_id"], a["verified"]) for a in listed] == [
        (art["artifact_id"], True),
        (whole["artifact_id"], True),
    ]
    with Cairn(data) as app:
        assert app.artifacts.read(art["artifact_id"]) == expected

    stored = data / "artifacts" / "sha256" / art["sha256"][:2] / art["sha256"][2:]
    stored.chmod(0o644)
    stored.write_bytes(b"def main():\n    steal()\n")
    with Cairn(data) as app:
        with pytest.raises(Exception) as info:
            app.artifacts.read(art["artifact_id"])
        assert f"artifact {art['artifact_id']} is corrupt" in str(info.value)
    line = one_error_line(cairnctl(data, "artifacts", "--verify", check=False))
    assert f"artifact {art['artifact_id']} is corrupt" in line


def test_promote_arguments_are_checked(world):
    data, _, task, _ = world
    line = one_error_line(cairnctl(data, "promote", task["task_id"], check=False))
    assert "--branch" in line and "--artifact" in line
    line = one_error_line(
        cairnctl(data, "promote", task["task_id"], "--branch", "x", "--path", "a", check=False)
    )
    assert "go with --artifact" in line
    line = one_error_line(
        cairnctl(
            data,
            "promote",
            task["task_id"],
            "--artifact",
            "--evidence",
            "/nonexistent/file",
            check=False,
        )
    )
    assert "cannot read the evidence file" in line


# -- export ---------------------------------------------------------------------------------------


def clone_at(repo: Path, commit: str, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(repo), str(dest)], check=True, capture_output=True)
    git(dest, "checkout", "-q", commit)
    return dest


def test_export_applies_to_the_import(world, tmp_path):
    data, repo, task, _ = world
    write_and_capture(data, task, {"src/util.py": "X = 3  # the task's change\n"})
    head = git(repo, "rev-parse", "HEAD").strip()
    patch = cairnctl(data, "export", task["task_id"]).stdout
    assert patch.startswith("From ") and "Subject: [PATCH] Fix the app" in patch
    assert "diff --git a/src/app.py b/src/app.py" in patch

    # From the base: applies to the work tree as it was at import (uncommitted files included).
    as_imported = clone_at(repo, head, tmp_path / "as-imported")
    for rel in ("src/util.py", "notes.txt"):
        shutil.copy(repo / rel, as_imported / rel)
    (tmp_path / "base.patch").write_text(patch)
    subprocess.run(
        ["git", "apply", "--check", str(tmp_path / "base.patch")], cwd=as_imported, check=True
    )
    subprocess.run(["git", "apply", str(tmp_path / "base.patch")], cwd=as_imported, check=True)
    root = Path(task["workspace_root"])
    for rel in ("src/app.py", "src/util.py", "tests/test_app.py", "notes.txt"):
        assert (as_imported / rel).read_text() == (root / rel).read_text(), rel

    # From HEAD: the uncommitted changes travel in the patch; applies to a clean checkout.
    clean = clone_at(repo, head, tmp_path / "clean")
    (tmp_path / "head.patch").write_text(
        cairnctl(data, "export", task["task_id"], "--from", "head").stdout
    )
    subprocess.run(["git", "apply", "--check", str(tmp_path / "head.patch")], cwd=clean, check=True)
    subprocess.run(
        ["git", "am", "-q", str(tmp_path / "head.patch")],
        cwd=clean,
        check=True,
        env={**os.environ, "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"},
    )
    for rel in ("src/app.py", "src/util.py", "tests/test_app.py", "notes.txt"):
        assert (clean / rel).read_text() == (root / rel).read_text(), rel

    # A clean clone at HEAD-at-import takes the base patch too when the task's changes do not
    # overlap the user's uncommitted ones.
    data2 = tmp_path / "data2"
    repo2 = make_repo(tmp_path / "repo2")
    task2 = new_task(data2, repo2)
    write_and_capture(data2, task2, {"src/app.py": "def main():\n    print('hi')\n"})
    clean2 = clone_at(repo2, git(repo2, "rev-parse", "HEAD").strip(), tmp_path / "clean2")
    (tmp_path / "b2.patch").write_text(cairnctl(data2, "export", task2["task_id"]).stdout)
    subprocess.run(["git", "apply", "--check", str(tmp_path / "b2.patch")], cwd=clean2, check=True)


def test_export_with_nothing_changed_is_empty(tmp_path):
    data = tmp_path / "data"
    task = new_task(data, make_repo(tmp_path / "repo"))
    assert cairnctl(data, "export", task["task_id"]).stdout == ""


# -- a granted secret, with the real keyring ------------------------------------------------------


@pytest.mark.keyring
def test_a_granted_secret_in_the_workspace_refuses_the_branch(secret_service, tmp_path):
    secrets = SecretStore(
        f"cairn-test-{uuid.uuid4().hex[:12]}", backend=secret_service, redactor=Redactor()
    )
    try:
        secrets.set("api", CANARY)
        repo = make_repo(tmp_path / "repo")
        with Cairn(tmp_path / "data", secrets=secrets) as app:
            made = app.tasks.new(repo, title="t")
            app.credentials.grant(made.task.id, "api", "API_KEY")
            (Path(made.workspace.root) / "out.txt").write_text(f"key={CANARY}\n")
            app.revisions.capture(made.task.id)
            before = repo_state(repo)
            with pytest.raises(SecretFound) as info:
                app.artifacts.promote_to_branch(made.task.id, "cairn/leak")
            assert "out.txt (the granted secret 'api', line 1)" in str(info.value)
            assert CANARY not in str(info.value)
            assert repo_state(repo) == before
            events = json.dumps([dict(r) for r in app.ctx.store.query("SELECT * FROM events")])
            assert CANARY not in events
    finally:
        for name in ("api",):
            try:
                secrets.delete(name)
            except SecretMissing:
                pass
        try:
            secret_service.delete_password(secrets.service, INDEX_KEY)
        except Exception:
            pass


# -- engine settings ------------------------------------------------------------------------------


def test_config_set_get_show_round_trip(tmp_path):
    data = tmp_path / "data"
    cairnctl(data, "config", "set", "engines.codex.base_url", "https://api.example.com/v1")
    cairnctl(data, "config", "set", "engines.codex.api_key_secret", "openai")
    cairnctl(data, "config", "set", "engines.claude-code.model", "sonnet")
    assert (
        cairnctl(data, "config", "get", "engines.codex.base_url").stdout
        == "https://api.example.com/v1\n"
    )
    assert as_json(cairnctl(data, "config", "get", "engines.codex", "--json"))["value"] == {
        "base_url": "https://api.example.com/v1",
        "api_key_secret": "openai",
    }
    shown = as_json(cairnctl(data, "config", "show", "--json"))
    assert shown == json.loads((data / "settings.json").read_text())
    assert shown["engines"]["claude-code"] == {"model": "sonnet"}
    unset = cairnctl(data, "config", "get", "engines.shell.model", check=False)
    assert unset.returncode == 1 and unset.stdout == ""
    cairnctl(data, "config", "unset", "engines.claude-code.model")
    assert "claude-code" not in as_json(cairnctl(data, "config", "show", "--json"))["engines"]


def test_config_defaults_round_trip_and_apply_to_a_new_task(tmp_path):
    data = tmp_path / "data"
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("a\n")
    cairnctl(data, "config", "set", "defaults.engine", "codex")
    cairnctl(data, "config", "set", "defaults.network", "allowlist")
    assert (
        cairnctl(
            data, "config", "set", "defaults.allow", "API.example.com:443, 127.0.0.1:11434"
        ).stdout
        == "defaults.allow = api.example.com:443,127.0.0.1:11434\n"
    )
    assert cairnctl(data, "config", "get", "defaults.engine").stdout == "codex\n"
    assert as_json(cairnctl(data, "config", "get", "defaults", "--json"))["value"] == {
        "engine": "codex",
        "network": "allowlist",
        "allow": "api.example.com:443,127.0.0.1:11434",
    }
    made = as_json(cairnctl(data, "new", str(folder), "--json"))
    shown = as_json(cairnctl(data, "show", made["task_id"], "--json"))
    assert shown["engine"] == "codex"
    cairnctl(data, "config", "unset", "defaults.engine")
    assert cairnctl(data, "config", "get", "defaults.engine", check=False).returncode == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["set", "engines.gemini.model", "x"], "unknown engine 'gemini'"),
        (["set", "engines.codex.temperature", "1"], "unknown engine setting 'temperature'"),
        (["set", "engines.codex.binary", "codex"], "absolute path"),
        (["set", "engines.codex.base_url", "not a url"], "http:// or https://"),
        (["set", "engines.codex.model"], "needs a VALUE"),
        (["get", "codex.model"], "not a settings key"),
        (["set", "defaults.network", "internet"], "unknown network mode 'internet'"),
        (["set", "defaults.allow", "example.com"], "'example.com' is not a usable host:port"),
        (["set", "defaults.backend", "podman"], "unknown sandbox backend 'podman'"),
        (["set", "defaults.image", "Not An Image"], "Docker image reference"),
        (["set", "defaults.engine", "gemini"], "unknown engine 'gemini'"),
        (["get", "defaults.colour"], "unknown default 'colour'"),
        (["get"], "needs a KEY"),
        (["bogus"], "invalid choice"),
    ],
)
def test_config_errors_exit_2_with_one_line(tmp_path, args, message):
    data = tmp_path / "data"
    line = one_error_line(cairnctl(data, "config", *args, check=False))
    assert message in line
    assert not (data / "settings.json").exists()
