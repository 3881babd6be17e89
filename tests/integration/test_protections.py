"""What a sandbox refuses by construction, with no approval asked: a run planting a git hook (or
anything else that makes a later git command run code) in the workspace by any route fails, and
a later `git commit` runs no hook; the rest of the filesystem stays read-only; nothing from the
host user's home reaches the sandbox home; a sandbox made before these protections is made again
on the next run. Real Docker, the default sandbox image, every command let through (no rules),
so only the sandbox's construction stands in the way.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from core.app import Cairn
from core.errors import CairnError
from core.models import Run
from core.sandboxes import SandboxManager
from core.workspaces import protect_git, set_git_config
from tests.support import deciding_every_request

pytestmark = pytest.mark.docker

NO_RULES = json.dumps({"version": 1, "rules": []})

# A hook that leaves a marker named after the route that planted it, kept in the home (writable,
# and unlike /tmp not mounted noexec), so a hook reached there would run.
PREPARE = r"""
mkdir -p /home/agent/h /home/agent/tpl/hooks /workspace/.evil/hooks
hook() { printf '#!/bin/sh\ntouch /workspace/.markers/%s\n' "$1"; }
mkdir -p /workspace/.markers
for name in pre-commit post-commit commit-msg prepare-commit-msg; do
    hook "hookspath-$name" > /home/agent/h/$name; chmod +x /home/agent/h/$name
    hook "template-$name" > /home/agent/tpl/hooks/$name; chmod +x /home/agent/tpl/hooks/$name
    hook "commondir-$name" > /workspace/.evil/hooks/$name; chmod +x /workspace/.evil/hooks/$name
done
hook planted > /home/agent/hook; chmod +x /home/agent/hook
"""

# Each route is one line: its exit status is recorded; what matters is that no hook runs later.
ROUTES = {
    "echo": "echo 'touch /workspace/.markers/echo' > .git/hooks/pre-commit",
    "echo-append": "echo 'touch /workspace/.markers/append' >> .git/hooks/post-commit",
    "cp": "cp /home/agent/hook .git/hooks/pre-commit",
    "tee-double-slash": "tee .git//hooks/post-commit < /home/agent/hook",
    "absolute-path": "cp /home/agent/hook /workspace/./.git/hooks/commit-msg",
    "cd-hooks": "cd .git/hooks && cp /home/agent/hook prepare-commit-msg",
    "install": "install -m 755 /home/agent/hook .git/hooks/pre-commit",
    "python": "python3 -c \"open('.git/hooks/pre-commit','w').write(open('/home/agent/hook').read())\"",
    "python-shutil": "python3 -c \"import shutil; shutil.copy('/home/agent/hook','.git/hooks/post-commit')\"",
    "chmod-hooks": "chmod 777 .git/hooks",
    "mv-hooks-away": "mv .git/hooks .git/hooks.old && mkdir .git/hooks && cp /home/agent/hook .git/hooks/pre-commit",
    "rm-and-link-hooks": "rm -rf .git/hooks && ln -s /home/agent/h .git/hooks",
    "link-into-hooks": "ln -s /home/agent/hook .git/hooks/pre-commit",
    "replace-git-dir": "mv .git /workspace/.git-old && git init -q --template=/home/agent/tpl .",
    "git-init-template": "git init -q --template=/home/agent/tpl",
    "config-local": "git config core.hooksPath /home/agent/h",
    "config-local-lowercase": "git config core.hookspath /home/agent/h",
    "config-fsmonitor": "git config core.fsmonitor 'touch /workspace/.markers/fsmonitor; true'",
    "config-global": "git config --global core.hooksPath /home/agent/h",
    "config-echo": "printf '[core]\\n\\thooksPath = /home/agent/h\\n' >> .git/config",
    "config-sed": "sed -i 's/^\\[core\\]/[core]\\n\\thooksPath = \\/tmp\\/h/' .git/config",
    "config-link": "ln -sf /home/agent/cfg .git/config",
    "config-include": "git config include.path /home/agent/cfg",
    "config-worktree": "git config extensions.worktreeConfig true",
    "home-gitconfig": "printf '[core]\\n\\thooksPath = /home/agent/h\\n' > ~/.gitconfig",
    "home-xdg-gitconfig": (
        "mkdir -p ~/.config/git && printf '[core]\\n\\thooksPath = /home/agent/h\\n' > ~/.config/git/config"
    ),
    "commondir": (
        "printf '[core]\\n\\trepositoryformatversion = 0\\n' > /workspace/.evil/config && "
        "cp -r .git/objects .git/refs .git/HEAD /workspace/.evil/ && echo ../.evil > .git/commondir"
    ),
}

LATER_COMMIT = (
    "cd /workspace && echo change >> README && git add README && git commit -q -m later "
    "&& git log --format=%s -1 > /workspace/.later-commit"
)


def _script(routes: dict[str, str]) -> str:
    lines = [PREPARE, "cd /workspace", ": > /workspace/.routes"]
    for name, line in routes.items():
        lines.append(f'( {line} ) > /dev/null 2>&1; echo "{name} $?" >> /workspace/.routes')
    return "\n".join(lines) + "\n"


def _run(cairn: Cairn, task_id: str, *commands: str) -> Run:
    run = cairn.runs.start(task_id, commands=list(commands))
    return cairn.runs.follow(run.id)


def _markers(ws: Path) -> list[str]:
    folder = ws / ".markers"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.fixture
def cairn(task):
    """Every request approved at once: construction alone must hold."""
    data, _, _ = task
    with Cairn(data) as app, deciding_every_request(data, "approve"):
        app.approvals.set_risk_rules(NO_RULES)
        yield app


def test_no_route_plants_a_hook_and_a_later_commit_runs_none(task, cairn):
    _, task_id, ws = task
    (ws / "attack.sh").write_text(_script(ROUTES))
    run = _run(cairn, task_id, "bash /workspace/attack.sh")
    assert run.state == "succeeded", cairn.runs.output(run.id)
    results = dict(line.split() for line in (ws / ".routes").read_text().splitlines())
    assert set(results) == set(ROUTES)
    # Every write into the protected paths failed (the home's own files may be written, but
    # no git in the sandbox reads them).
    may_write = {"home-gitconfig", "home-xdg-gitconfig"}
    succeeded = sorted(n for n, rc in results.items() if rc == "0" and n not in may_write)
    assert succeeded == [], succeeded
    # On the host: the hooks folder holds nothing, the config only what Cairn wrote.
    assert sorted(p.name for p in (ws / ".git" / "hooks").iterdir()) == []
    config = (ws / ".git" / "config").read_text()
    assert "hookspath" not in config.lower() and "fsmonitor" not in config
    assert "include" not in config and "worktree" not in config.lower()
    assert (ws / ".git" / "commondir").read_text() == ".\n"
    assert not (ws / ".git-old").exists()

    # A later commit, in a new run with nothing of the attack's environment, runs no hook.
    later = _run(cairn, task_id, LATER_COMMIT)
    assert later.state == "succeeded", cairn.runs.output(later.id)
    assert (ws / ".later-commit").read_text().strip() == "later"
    assert _markers(ws) == []


def test_an_emptied_git_folder_cannot_be_rebuilt_with_hooks(task, cairn):
    """`rm -rf .git` deletes what git itself writes (the workspace's files stay, recorded), but
    .git and its protected paths stay where they are: a `git init` there cannot bring hooks."""
    _, task_id, ws = task
    (ws / "prepare.sh").write_text(PREPARE)
    run = _run(
        cairn,
        task_id,
        "bash /workspace/prepare.sh",
        "rm -rf .git; git init -q --template=/home/agent/tpl . ; true",
        "git add -A; git commit -q -m after-rm; git log --oneline > /workspace/.after-rm 2>&1; true",
    )
    assert run.state == "succeeded", cairn.runs.output(run.id)
    assert sorted(p.name for p in (ws / ".git" / "hooks").iterdir()) == []
    assert (ws / ".git" / "commondir").read_text() == ".\n"
    assert _markers(ws) == []


def test_settings_given_to_one_command_run_its_hook_only_there(task, cairn):
    """`git -c core.hooksPath=…` and `GIT_CONFIG_*` in a command's own environment are that
    command choosing to run a program now, not something planted for later: the sandbox cannot
    refuse them by construction (the supervisor judges the program start). Nothing stays behind:
    the next plain commit runs no hook."""
    _, task_id, ws = task
    (ws / "prepare.sh").write_text(PREPARE)
    run = _run(
        cairn,
        task_id,
        "bash /workspace/prepare.sh",
        "cp -r /home/agent/h /home/agent/h2 && sed -i s/hookspath/envcount/ /home/agent/h2/*",
        "git -c core.hooksPath=/home/agent/h commit -q --allow-empty -m one",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/home/agent/h2 "
        "git commit -q --allow-empty -m two",
    )
    assert run.state == "succeeded", cairn.runs.output(run.id)
    assert {"hookspath-pre-commit", "envcount-pre-commit"} <= set(_markers(ws))
    for marker in (ws / ".markers").iterdir():
        marker.unlink()
    later = _run(cairn, task_id, LATER_COMMIT)
    assert later.state == "succeeded", cairn.runs.output(later.id)
    assert _markers(ws) == []


def test_normal_git_work_still_works(task, cairn):
    _, task_id, ws = task
    steps = [
        "git status --short",
        "echo one > one.txt && git add one.txt && git commit -q -m one",
        "git branch feature && git switch -q feature",
        "echo two > two.txt && git add two.txt && git commit -q -m two",
        "git switch -q - && git merge -q --no-edit feature",
        "echo wip >> one.txt && git stash -q && git stash list | grep -q WIP && git stash pop -q",
        "git commit -q -am three && git tag v1 && git reset -q --soft HEAD~1 && git commit -q -m three",
        "git rebase -q feature",
        "git gc -q && git fsck --no-dangling",
        "git log --format=%s > /workspace/log.txt && git branch --format='%(refname:short)' > branches.txt",
    ]
    run = _run(cairn, task_id, *steps)
    assert run.state == "succeeded", cairn.runs.output(run.id)
    assert (ws / "log.txt").read_text().splitlines()[:3] == ["three", "two", "one"]
    assert "feature" in (ws / "branches.txt").read_text().split()


def test_only_the_workspace_the_home_and_tmp_are_writable(task, cairn):
    _, task_id, ws = task
    places = [
        "/workspace/w",
        "/workspace/.git/w",
        "/home/agent/w",
        "/tmp/w",
        "/w",
        "/etc/w",
        "/usr/local/bin/w",
        "/var/w",
        "/opt/w",
        "/cairn/tools/w",
        "/cairn/git/config",
        "/cairn/git/w",
        "/workspace/.git/hooks/w",
        "/workspace/.git/config",
        "/workspace/.git/commondir",
    ]
    script = "\n".join(
        f'( : >> {p} ) 2>/dev/null; echo "{p} $?" >> /workspace/.writes' for p in places
    )
    (ws / "writes.sh").write_text(script + "\n")
    run = _run(cairn, task_id, "bash /workspace/writes.sh")
    assert run.state == "succeeded", cairn.runs.output(run.id)
    results = dict(line.split() for line in (ws / ".writes").read_text().splitlines())
    writable = sorted(p for p, rc in results.items() if rc == "0")
    assert writable == ["/home/agent/w", "/tmp/w", "/workspace/.git/w", "/workspace/w"]


def test_nothing_from_the_host_users_home_reaches_the_sandbox(task, tmp_path, monkeypatch):
    data, task_id, ws = task
    home = tmp_path / "person"
    for rel in (".ssh/id_rsa", ".aws/credentials", ".config/gh/hosts.yml", ".netrc", ".gitconfig"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("secret\n")
    monkeypatch.setenv("HOME", str(home))
    with Cairn(data) as app:
        app.approvals.set_risk_rules(NO_RULES)
        run = _run(app, task_id, "find ~ -maxdepth 3 > /workspace/home.txt")
        assert run.state == "succeeded", app.runs.output(run.id)
    listed = (ws / "home.txt").read_text()
    for name in (".ssh", "id_rsa", ".aws", "hosts.yml", ".netrc", ".gitconfig"):
        assert name not in listed, listed


def test_a_sandbox_made_before_the_protections_is_made_again(task, cairn, monkeypatch):
    _, task_id, ws = task
    unprotected = SandboxManager.spec_for

    def old_spec_for(self, *args, **kwargs):
        return unprotected(self, *args, **{**kwargs, "protect_git": False})

    monkeypatch.setattr(SandboxManager, "spec_for", old_spec_for)
    (ws / ".markers").mkdir()
    plant = (
        "printf '#!/bin/sh\\ntouch /workspace/.markers/old-hook\\n' > .git/hooks/pre-commit "
        "&& chmod +x .git/hooks/pre-commit"
    )
    first = _run(cairn, task_id, plant)
    assert first.state == "succeeded", cairn.runs.output(first.id)
    record = cairn.ctx.store.session_for(first.workspace_id)
    assert record is not None
    assert (ws / ".git" / "hooks" / "pre-commit").exists()  # the old sandbox let it through
    before = (record.container_id, record.generation, record.snapshot_id)
    monkeypatch.undo()

    later = _run(cairn, task_id, LATER_COMMIT)
    assert later.state == "succeeded", cairn.runs.output(later.id)
    record = cairn.ctx.store.session_for(first.workspace_id)
    assert record is not None
    assert record.container_id != before[0]
    assert record.generation == before[1] + 1 and record.snapshot_id == before[2]
    assert any(m["target"] == "/workspace/.git/hooks" and m["read_only"] for m in record.mounts)
    # The hook planted before is moved out of the hooks folder, and none runs.
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert any((ws / ".git" / "hooks.disabled").iterdir())
    assert _markers(ws) == []


def _repo(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    protect_git(root)
    return root / ".git"


def test_preparing_a_workspace_undoes_what_was_planted_before(tmp_path):
    """What a sandbox made before the protections could leave in .git, repaired on the host
    before the next sandbox mounts it."""
    git_dir = _repo(tmp_path / "ws")
    outside = tmp_path / "outside"
    outside.write_text('[core]\n\thooksPath = /somewhere\n[filter "x"]\n\tclean = evil\n')
    (git_dir / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (git_dir / "config").unlink()
    os.link(outside, git_dir / "config")  # shared with a file the sandbox could write
    (git_dir / "commondir").write_text("../.evil\n")
    notes = protect_git(tmp_path / "ws")
    assert len(notes) == 4, notes
    assert [p for p in (git_dir / "hooks").iterdir() if not p.name.endswith(".sample")] == []
    assert [p.name.split(".")[0] for p in (git_dir / "hooks.disabled").iterdir()] == ["pre-commit"]
    config = (git_dir / "config").read_text()
    assert "hooksPath" not in config and "filter" not in config
    assert os.stat(git_dir / "config").st_nlink == 1
    assert (git_dir / "commondir").read_text() == ".\n"
    assert protect_git(tmp_path / "ws") == []  # nothing left to repair

    (git_dir / "config").unlink()
    (git_dir / "config").symlink_to(outside)
    (git_dir / "HEAD").unlink()
    protect_git(tmp_path / "ws")
    assert not (git_dir / "config").is_symlink() and (git_dir / "HEAD").is_file()
    assert "filter" in outside.read_text()  # the link's target is moved aside, never read

    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".git").symlink_to(git_dir)
    with pytest.raises(CairnError, match="not a folder"):
        protect_git(linked)


def test_cairn_changes_the_workspace_config_in_place(tmp_path):
    git_dir = _repo(tmp_path / "ws")
    before = os.stat(git_dir / "config").st_ino
    set_git_config(tmp_path / "ws", "user.name", "Someone")
    assert os.stat(git_dir / "config").st_ino == before  # a read-only mount of it sees the change
    out = subprocess.run(
        ["git", "config", "--file", str(git_dir / "config"), "user.name"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "Someone"
