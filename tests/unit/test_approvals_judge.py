"""The approvals mailbox end to end with real files and the real gate script, without Docker:
the gate (as an agent's PreToolUse hook) writes a request and waits, the judge answers through
the decision folder, and the approval rows, run states, checkpoints, timeouts and remembered
commands follow; program starts are requests written as the exec supervisor writes them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import approvals, approvals_exec, mailbox
from core.app import Cairn
from core.approvals import Judge
from core.errors import Conflict
from core.ids import new_id
from core.models import Run
from core.models import RunState as R

GATE = Path(approvals.__file__).resolve().parents[1] / "resources" / "sandbox" / "approval-gate.py"


class HostPaths:
    """Stands in for a live session whose processes see sandbox paths as host folders."""

    def __init__(self, data: Path, workspace_id: str):
        self.map = {
            "/cairn/runs": data / "runs" / workspace_id,
            "/cairn/decisions": data / "approvals" / workspace_id,
        }

    def visible_path(self, path: str) -> str:
        for target, source in self.map.items():
            if path == target or path.startswith(target + "/"):
                return str(source) + path[len(target) :]
        return path


class Clock:
    def __init__(self):
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def app(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hello\n")
    with Cairn(tmp_path / "data") as cairn:
        cairn.tasks.new(src, title="demo")
        yield cairn


def start_run(app: Cairn, engine: str = "claude-code", spec: dict | None = None) -> Run:
    """A run in flight as `_launch` leaves it (no sandbox needed to judge its mailbox)."""
    task = app.tasks.all()[0]
    run = Run(
        new_id("run"),
        task.id,
        R.RUNNING.value,
        0,
        engine,
        spec if spec is not None else {"prompt": "go on"},
        workspace_id=task.workspace_id,
        attempt=1,
        created_at=time.time(),
    )
    app.ctx.store.add_run(run)
    return run


def gate_env(app: Cairn, run: Run, **extra: str) -> dict[str, str]:
    live = HostPaths(app.data.root, run.workspace_id or "")
    return {**os.environ, **approvals.gate_environment(run, live), **extra}


def gate(
    app: Cairn, run: Run, *args: str, stdin: str | None = None, **env: str
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(GATE), *args],
        env=gate_env(app, run, **env),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def tool_call(app: Cairn, run: Run, command: str, **env: str) -> subprocess.Popen:
    """The gate as Claude Code's PreToolUse hook, asked about a Bash tool call of `command`."""
    proc = gate(app, run, "--claude-hook", stdin="", **env)
    assert proc.stdin is not None
    call = {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": "/workspace"}
    proc.stdin.write(json.dumps({**call, "session_id": "s"}))
    proc.stdin.close()
    return proc


def answered(proc: subprocess.Popen, judge: Judge | None = None) -> tuple[str, str]:
    """The hook's answer once judged (or, with no judge, once the gate gave up): its
    decision and its reason."""
    if judge is None:
        proc.wait(20)
        code, out, err = proc.returncode, proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    else:
        code, out, err = finish(proc, judge)
    assert code == 0, err
    answer = json.loads(out)["hookSpecificOutput"]
    return answer["permissionDecision"], answer["permissionDecisionReason"]


def finish(
    proc: subprocess.Popen, judge: Judge, *, stdin: str | None = None, timeout: float = 20.0
) -> tuple[int, str, str]:
    """Judge until the gate has its answer."""
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, "the gate never got an answer"
        judge.poll()
        time.sleep(0.02)
    return proc.returncode, proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]


def wait_for_row(
    app: Cairn, judge: Judge, state: str = approvals.PENDING, timeout: float = 20.0
) -> approvals.Approval:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        judge.poll()
        found = [a for a in judge.list(pending_only=False) if a.state == state]
        if found:
            return found[-1]
        time.sleep(0.02)
    raise AssertionError(f"no {state} approval appeared")


def requests_folder(app: Cairn, run: Run) -> Path:
    return approvals.requests_dir(app.data.runs_root, run)


def decision_of(app: Cairn, run: Run, approval_id: str) -> dict:
    path = approvals.decision_path(app.data.root, run.workspace_id or "", run.exec_id, approval_id)
    return json.loads(path.read_text())


def assert_requests_folder_holds_requests_only(app: Cairn, run: Run) -> None:
    for path in requests_folder(app, run).iterdir():
        doc = json.loads(path.read_text())
        assert path.name == f"{doc['id']}.json" and "decision" not in doc, path


def events_of(app: Cairn, kind: str) -> list[dict]:
    return [e for e in app.ctx.store.events_since(0, limit=100000) if e["kind"] == kind]


def test_a_command_the_rules_pass_is_allowed_at_once_and_recorded_as_automatic(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    assert answered(tool_call(app, run, "echo safe > a.txt"), judge)[0] == "allow"
    (row,) = judge.list(pending_only=False)
    assert (row.state, row.decided_by, row.auto, row.command) == (
        approvals.AUTO_ALLOWED,
        approvals.BY_RULES,
        True,
        "echo safe > a.txt",
    )
    assert decision_of(app, run, row.id)["decision"] == "allow"
    assert app.ctx.store.get_run(run.id).state == R.RUNNING.value
    assert judge.list() == []
    assert_requests_folder_holds_requests_only(app, run)


def test_a_risky_command_waits_for_a_person_with_a_checkpoint_then_runs_once_approved(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    checkpoints_before = len(app.ctx.store.list_checkpoints(run.id))
    proc = tool_call(app, run, "git push --force origin main")
    pending = wait_for_row(app, judge)
    assert (pending.rule, pending.run_id, pending.task_id) == (
        "git-force-push",
        run.id,
        run.task_id,
    )
    assert "force-push" in (pending.reason or "")
    assert pending.timeout_at == pytest.approx(pending.created_at + judge.timeout)
    assert app.ctx.store.get_run(run.id).state == R.WAITING_APPROVAL.value
    assert len(app.ctx.store.list_checkpoints(run.id)) == checkpoints_before + 1
    requested = events_of(app, "approval.requested")
    assert [e["payload"]["approval_id"] for e in requested] == [pending.id]
    time.sleep(0.3)
    assert proc.poll() is None, "the gate must wait for the person"

    decided = app.approvals.approve(pending.id[:8])  # a prefix is enough
    assert answered(proc, judge)[0] == "allow"
    assert (decided.state, decided.decided_by) == (approvals.APPROVED, approvals.os_user())
    assert (
        decided.decided_at
        and decided.policy_version
        == app.tasks.policy_of(app.tasks.workspace_of(app.tasks.get(run.task_id))).version
    )
    assert decision_of(app, run, pending.id)["decision"] == "allow"
    assert app.ctx.store.get_run(run.id).state == R.RUNNING.value
    assert events_of(app, "approval.decided")[-1]["payload"]["approval_state"] == "approved"
    with pytest.raises(Conflict, match="approved already"):
        app.approvals.deny(pending.id)
    assert_requests_folder_holds_requests_only(app, run)


def test_a_denied_command_is_refused_and_the_run_is_told_why(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    proc = tool_call(app, run, "sudo rm -rf /")
    pending = wait_for_row(app, judge)
    app.approvals.deny(pending.id, reason="not on my machine")
    decision, reason = answered(proc, judge)
    assert decision == "deny"
    assert "denied" in reason and "not on my machine" in reason
    (row,) = judge.list(pending_only=False)
    assert (row.state, row.decided_by) == (approvals.DENIED, approvals.os_user())
    assert decision_of(app, run, row.id)["decision"] == "deny"
    assert app.ctx.store.get_run(run.id).state == R.RUNNING.value
    assert_requests_folder_holds_requests_only(app, run)


def test_an_unanswered_request_is_denied_at_its_timeout(app):
    run = start_run(app)
    clock = Clock()
    judge = app.approvals.with_options(timeout=600, clock=clock)
    proc = tool_call(app, run, "git push origin main")
    pending = wait_for_row(app, judge)
    clock.now += 599
    judge.poll()
    assert judge.get(pending.id).state == approvals.PENDING
    clock.now += 2
    decision, reason = answered(proc, judge)
    assert decision == "deny" and "no decision within 600 s" in reason
    row = judge.get(pending.id)
    assert (row.state, row.decided_by) == (approvals.TIMED_OUT, approvals.BY_TIMEOUT)
    assert decision_of(app, run, row.id)["decision"] == "deny"
    assert app.ctx.store.get_run(run.id).state == R.RUNNING.value


def test_the_gate_denies_by_itself_when_nobody_answers_in_time(app):
    run = start_run(app)
    started = time.monotonic()
    proc = tool_call(app, run, "echo fine", CAIRN_APPROVAL_TIMEOUT="0.5")
    decision, reason = answered(proc)  # no judge at all
    assert decision == "deny" and "no decision within 0.5 s" in reason
    assert time.monotonic() - started < 10


def test_requests_survive_a_restart_and_rows_are_made_once(app, tmp_path):
    run = start_run(app)
    proc = tool_call(app, run, "npm publish")
    first = wait_for_row(app, app.approvals.with_options())
    # Cairn goes away; a new one (a new process: new objects, new connections) looks again.
    with Cairn(app.data.root) as again:
        judge = again.approvals.with_options()
        for _ in range(3):
            judge.poll()
        (still,) = judge.list()
        assert still.id == first.id and still.rule == "package-publish"
        assert len(again.ctx.store.query("SELECT id FROM approvals")) == 1
        assert len(events_of(again, "approval.requested")) == 1
        again.approvals.approve(still.id)
        assert answered(proc, judge)[0] == "allow"


def test_a_request_written_while_no_judge_ran_and_a_lost_decision_file_are_both_recovered(app):
    run = start_run(app)
    quiet = tool_call(app, run, "ls")  # nobody judges while it writes its request
    deadline = time.monotonic() + 20
    while not list(requests_folder(app, run).glob("*.json")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    judge = app.approvals.with_options()
    assert answered(quiet, judge)[0] == "allow"
    (row,) = judge.list(pending_only=False)
    # A judge that stopped between the row and the file: the next one writes the file.
    path = approvals.decision_path(app.data.root, run.workspace_id or "", run.exec_id, row.id)
    path.unlink()
    app.approvals.with_options().poll()
    assert json.loads(path.read_text())["decision"] == "allow"


def test_remember_lets_the_exact_command_pass_from_now_on_under_a_new_policy_version(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    task = app.tasks.get(run.task_id)
    version = app.tasks.policy_of(app.tasks.workspace_of(task)).version
    command = "git push --force origin main"
    proc = tool_call(app, run, command)
    pending = wait_for_row(app, judge)
    decided = app.approvals.approve(pending.id, remember=True)
    assert answered(proc, judge)[0] == "allow"
    policy = app.tasks.policy_of(app.tasks.workspace_of(task))
    assert policy.approved == (command,) and policy.version > version
    assert decided.policy_version == policy.version
    assert events_of(app, "policy.changed")[-1]["payload"]["version"] == policy.version

    assert answered(tool_call(app, run, command), judge)[0] == "allow"
    latest = judge.list(pending_only=False)[-1]
    assert (latest.state, latest.rule) == (approvals.AUTO_ALLOWED, "remembered")
    # Only that exact command.
    other = tool_call(app, run, command + " --tags")
    assert wait_for_row(app, judge).command == command + " --tags"
    other.kill()


def test_a_request_of_a_run_that_ended_is_withdrawn_and_cannot_be_approved(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    proc = tool_call(app, run, "git push")
    pending = wait_for_row(app, judge)
    proc.kill()
    proc.wait()
    folder = approvals.requests_dir(app.data.runs_root, run).parent
    (folder / "exit_code").write_text("137\n")
    judge.poll()
    assert judge.get(pending.id).state == approvals.WITHDRAWN
    with pytest.raises(Conflict):
        app.approvals.approve(pending.id)
    app.runs.end(run.id, 137)
    assert app.ctx.store.get_run(run.id).state == R.FAILED.value


def test_an_unusable_request_is_refused_and_the_sandbox_cannot_point_the_judge_elsewhere(app):
    run = start_run(app)
    folder = requests_folder(app, run)
    folder.mkdir(parents=True)
    bad = "ap_" + "0" * 14
    (folder / f"{bad}.json").write_text('{"id": "ap_other", "command": "ls"}')
    (folder / "not-a-request.json").write_text("{}")
    app.approvals.with_options().poll()
    decision = decision_of(app, run, bad)
    assert decision["decision"] == "deny" and "unusable" in decision["reason"]
    assert app.approvals.with_options().list(pending_only=False) == []
    # A requests folder replaced by a symlink (to anywhere on the host) is not followed.
    other = start_run(app)
    outside = app.data.root.parent / "outside"
    outside.mkdir()
    (outside / f"{bad[:-1]}1.json").write_text(json.dumps({"id": bad[:-1] + "1", "command": "ls"}))
    link = requests_folder(app, other)
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    app.approvals.with_options().poll()
    assert not (app.data.root / "approvals" / (other.workspace_id or "") / other.exec_id).exists()


def test_claude_and_codex_hooks_get_answers_in_their_own_format(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    bash = json.dumps(
        {
            "tool_name": "Bash",
            "tool_input": {"command": "echo hi"},
            "session_id": "s",
            "cwd": "/workspace",
        }
    )
    code, out, _ = finish(gate(app, run, "--claude-hook", stdin=""), judge, stdin=bash)
    answer = json.loads(out)["hookSpecificOutput"]
    assert code == 0 and answer["hookEventName"] == "PreToolUse"
    assert answer["permissionDecision"] == "allow"

    write = json.dumps(
        {
            "tool_name": "Write",
            "session_id": "s",
            "cwd": "/workspace",
            "tool_input": {
                "file_path": "/workspace/.git/hooks/pre-commit",
                "content": "#!/bin/sh\n",
            },
        }
    )
    proc = gate(app, run, "--claude-hook", stdin="")
    assert proc.stdin is not None
    proc.stdin.write(write)
    proc.stdin.close()
    pending = wait_for_row(app, judge)
    assert pending.command == "Write /workspace/.git/hooks/pre-commit"
    assert pending.rule == "git-hooks-write"
    app.approvals.deny(pending.id)
    code, out, _ = finish(proc, judge)
    answer = json.loads(out)["hookSpecificOutput"]
    assert code == 0 and answer["permissionDecision"] == "deny"
    assert "denied" in answer["permissionDecisionReason"]

    codex = json.dumps(
        {
            "tool_name": "Bash",
            "tool_input": {"command": ["bash", "-lc", "ls"]},
            "session_id": "s",
            "cwd": "/workspace",
        }
    )
    code, out, _ = finish(gate(app, run, "--codex-hook", stdin=""), judge, stdin=codex)
    assert code == 0 and out.strip() == ""  # allowed: Codex takes silence as go-ahead
    assert judge.list(pending_only=False)[-1].command == "ls"
    proc = gate(app, run, "--codex-hook", stdin="")
    push = json.dumps({"tool_name": "Bash", "tool_input": {"command": "git push"}})
    assert proc.stdin is not None
    proc.stdin.write(push)
    proc.stdin.close()
    app.approvals.deny(wait_for_row(app, judge).id)
    code, out, _ = finish(proc, judge)
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"


class FakeSecrets:
    def __init__(self, values: dict[str, str]):
        self.values = values

    def get(self, name: str) -> str:
        return self.values[name]


def test_a_secret_in_a_command_is_judged_whole_but_stored_by_its_name_only(tmp_path):
    canary = "canary-5ecret-value-0123456789"
    src = tmp_path / "src"
    src.mkdir()
    with Cairn(tmp_path / "data", secrets=FakeSecrets({"token": canary})) as app:
        made = app.tasks.new(src, title="demo")
        app.credentials.grant(made.task.id, "token", "TOKEN")
        run = start_run(app)
        judge = app.approvals.with_options()
        command = f"git push https://x:{canary}@example.com/r.git"
        proc = tool_call(app, run, command)
        pending = wait_for_row(app, judge)
        assert pending.rule == "git-push"
        assert canary not in pending.command and "[secret:token]" in pending.command
        app.approvals.deny(pending.id)
        assert answered(proc, judge)[0] == "deny"
        rows = app.ctx.store.query("SELECT * FROM approvals")
        events = app.ctx.store.query("SELECT payload FROM events")
        assert not any(canary in str(tuple(r)) for r in [*rows, *events])


class NoPython:
    """A sandbox whose image has no python3."""

    def visible_path(self, path: str) -> str:
        return path

    def exec(self, argv, **kwargs):
        from core.sandbox.base import ExecResult

        return ExecResult(127, "", "sh: python3: not found")


def test_a_sandbox_that_cannot_run_the_gate_goes_ungated_and_says_so(app):
    ws = app.tasks.workspace_of(app.tasks.all()[0])
    assert approvals.gate_command(app.ctx, ws.id, NoPython()) == []
    (problem,) = events_of(app, "workspace.problem")
    message = problem["payload"]["message"]
    assert "NOT checked" in message and "python3" in message


class CannotTrace(NoPython):
    """A sandbox whose python3 runs but where ptrace is refused."""

    def exec(self, argv, **kwargs):
        from core.sandbox.base import ExecResult

        return ExecResult(
            121, "", "cairn: supervision is unavailable: cannot trace the command (ptrace: EPERM)"
        )


@pytest.mark.parametrize(
    ("sandbox", "said"),
    [(NoPython(), "the sandbox image has no python3"), (CannotTrace(), "ptrace")],
)
def test_a_sandbox_that_cannot_supervise_refuses_the_run_with_the_reason(app, sandbox, said):
    ws = app.tasks.workspace_of(app.tasks.all()[0])
    with pytest.raises(approvals.Unsupervised) as refused:
        approvals.supervise_command(app.ctx, ws.id, sandbox)
    message = str(refused.value)
    assert said in message and "the run did not start" in message
    assert "\n" not in message and "cairn: " not in message
    # The program rules are where the sandbox reads them, and it cannot write them.
    placed = mailbox.decisions_root(app.ctx.data.root, ws.id) / ".rules" / "exec_rules.py"
    assert placed.read_text() == Path(approvals_exec.__file__).read_text()
    assert oct(placed.stat().st_mode & 0o777) == "0o644"


def test_a_sandbox_that_can_supervise_runs_under_the_supervisor(app):
    class Fine(NoPython):
        def exec(self, argv, **kwargs):
            from core.sandbox.base import ExecResult

            assert argv[-1] == "--check" and "--rules" in argv
            return ExecResult(0, "ok\n", "")

    ws = app.tasks.workspace_of(app.tasks.all()[0])
    argv = approvals.supervise_command(app.ctx, ws.id, Fine())
    assert argv[:2] == ["python3", "/cairn/tools/supervisor.py"]
    assert argv[2:] == [
        *("--judge", "--rules", "/cairn/decisions/.rules/exec_rules.py"),
        *("--workspace", "/workspace"),
    ]


# -- program starts (the supervisor's requests) ---------------------------------------------------

_SEQ = iter(range(10_000))


def exec_request(app: Cairn, run: Run, words: list[str], **extra) -> str:
    """Write a request as the supervisor does for a held program start; returns its id."""
    request_id = f"ap_{time.time_ns() % 10**9:09d}{next(_SEQ):05d}"
    doc = {
        "id": request_id,
        "run_id": run.id,
        "exec_id": run.exec_id,
        "engine": "shell",
        "tool": "exec",
        "command": " ".join(words),
        "cwd": "/workspace",
        "program": f"/usr/bin/{words[0]}",
        "argv": words,
        "env": {"HOME": "/home/agent"},
        "stdin": "null",
        "parents": [{"pid": 7, "program": "sh -c 'step'"}],
        "script_line": {"number": 2, "text": None},
        "created_at": time.time(),
        **extra,
    }
    folder = requests_folder(app, run)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{request_id}.json").write_text(json.dumps(doc))
    return request_id


def shell_run(app: Cairn, commands: list[str]) -> Run:
    return start_run(app, "shell", {"commands": commands})


def test_a_program_start_becomes_a_card_naming_the_program_and_its_step(app):
    run = shell_run(app, ["echo one", "git push --force origin main || true", "echo three"])
    judge = app.approvals.with_options()
    exec_request(app, run, ["git", "push", "--force", "origin", "main"])
    card = wait_for_row(app, judge)
    assert card.rule == "git-force-push" and card.command == "git push --force origin main"
    assert card.details["kind"] == "exec" and card.details["program"] == "/usr/bin/git"
    assert card.details["argv"] == ["git", "push", "--force", "origin", "main"]
    assert card.details["script"] == {
        "step": 1,
        "commands": ["echo one", "git push --force origin main || true", "echo three"],
    }
    assert card.details["parents"] == ["sh -c 'step'"]
    assert card.to_json()["details"] == dict(card.details)


def test_the_host_judges_a_program_start_again_from_its_facts(app):
    run = shell_run(app, ["ls"])
    judge = app.approvals.with_options()
    # The sandbox asked (whatever it claimed); the host's rules find nothing to ask.
    request_id = exec_request(app, run, ["ls", "-la"], verdict={"rule": "git-push"})
    allowed = wait_for_row(app, judge, approvals.AUTO_ALLOWED)
    assert allowed.id == request_id
    assert decision_of(app, run, request_id)["decision"] == "allow"


def test_an_unreadable_program_start_is_refused(app):
    run = shell_run(app, ["x"])
    judge = app.approvals.with_options()
    request_id = exec_request(app, run, ["git", "push"], argv="git push")
    deadline = time.monotonic() + 10
    while not approvals.decision_path(
        app.data.root, run.workspace_id or "", run.exec_id, request_id
    ).exists():
        assert time.monotonic() < deadline
        judge.poll()
        time.sleep(0.02)
    decided = decision_of(app, run, request_id)
    assert decided["decision"] == "deny" and "cannot be read" in decided["reason"]


def test_remember_on_a_program_card_lets_that_rule_through_for_the_task(app):
    run = shell_run(app, ["git push origin a", "git push origin b"])
    judge = app.approvals.with_options()
    exec_request(app, run, ["git", "push", "origin", "a"])
    first = wait_for_row(app, judge)
    judge.approve(first.id, remember=True)
    policy = app.tasks.policy_of(app.tasks.workspace_of(app.tasks.get(run.task_id)))
    assert policy.approved_rules == ("git-push",) and policy.approved == ()
    second = exec_request(app, run, ["git", "push", "origin", "b"])
    remembered = wait_for_row(app, judge, approvals.AUTO_ALLOWED)
    assert remembered.id == second and remembered.rule == "remembered"
    # Another rule still asks.
    exec_request(app, run, ["git", "push", "--force", "origin", "b"])
    assert wait_for_row(app, judge).rule == "git-force-push"


def test_a_deny_reason_is_kept_and_sent_back(app):
    run = shell_run(app, ["git push"])
    judge = app.approvals.with_options()
    exec_request(app, run, ["git", "push"])
    card = wait_for_row(app, judge)
    denied = judge.deny(card.id, reason="not on Fridays")
    assert denied.details["note"] == "not on Fridays"
    assert decision_of(app, run, card.id)["reason"].endswith(": not on Fridays")


def test_a_request_rewritten_in_the_sandbox_is_not_the_one_approved(app):
    """The requests folder is the run's own: a run that rewrites its waiting request so the card
    shows something harmless gets a card for the harmless text, and the approval of that card
    does not let the original command through."""
    run = start_run(app)
    judge = app.approvals.with_options()
    proc = tool_call(app, run, "git push --force origin main")
    folder = requests_folder(app, run)
    deadline = time.monotonic() + 10
    while not any(folder.glob("ap_*.json")):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    (path,) = folder.glob("ap_*.json")
    doc = json.loads(path.read_text())
    doc["command"] = "git push --force origin main  # harmless, trust me"
    path.write_text(json.dumps(doc))  # before the host reads it
    card = wait_for_row(app, judge)
    assert card.command == doc["command"]  # the card shows what the host read
    app.approvals.approve(card.id)
    decision, reason = answered(proc, judge)
    assert decision == "deny" and "changed in the sandbox" in reason, reason


def test_every_decision_names_the_bytes_it_is_about(app):
    run = start_run(app)
    judge = app.approvals.with_options()
    proc = tool_call(app, run, "git push origin main")
    card = wait_for_row(app, judge)
    raw = (requests_folder(app, run) / f"{card.id}.json").read_bytes()
    app.approvals.deny(card.id, reason="no")
    decision, reason = answered(proc, judge)
    assert decision == "deny" and reason.endswith(": no")
    assert decision_of(app, run, card.id)["request_sha256"] == hashlib.sha256(raw).hexdigest()
