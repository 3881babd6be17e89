"""Liveness needs evidence: gone only when the sandbox is absent or stopped or the process is
verifiably not there; a look that cannot be made is unknown, asked again, and never ends a run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import CairnError
from core.models import Run
from core.runs import liveness
from core.runs.liveness import run_liveness
from core.runs.reconcile import settle_run
from core.sandbox.base import (
    Attached,
    ExecResult,
    Gone,
    ProbeFailed,
    SandboxError,
    SandboxUnavailable,
)
from core.sandbox.docker import DockerLiveSession


class FakeLive:
    def __init__(self, answers: list[object]):
        self.answers = list(answers)
        self.asked = 0

    def process_alive(self, pid: int, *, run_id: str | None = None) -> bool:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)


class FakeManager:
    def __init__(self, look: object):
        self._look = look
        self.looks = 0

    def look_as_made(self, record, ws):
        self.looks += 1
        if isinstance(self._look, BaseException):
            raise self._look
        return self._look

    def sync_run_files(self, run, *, force=False):
        pass  # a sandbox on this machine: its run files are where they are read

    def mirror_workspace(self, run, *, follow=True):
        return None  # a sandbox on this machine: its workspace is the local folder


def make(tmp_path: Path, look: object, *, pid: str | None = "42", exit_code: str | None = None):
    run = Run("r_1", "t_1", "running", 1, "shell", workspace_id="ws_1", attempt=3)
    folder = tmp_path / "runs" / "ws_1" / run.exec_id
    folder.mkdir(parents=True)
    if pid is not None:
        (folder / "pid").write_text(pid)
    if exit_code is not None:
        (folder / "exit_code").write_text(exit_code)
    store = SimpleNamespace(
        get_workspace=lambda ws_id: SimpleNamespace(id=ws_id),
        session_for=lambda ws_id: SimpleNamespace(id="ses_1"),
    )
    ctx = SimpleNamespace(data=SimpleNamespace(runs_root=tmp_path / "runs"), store=store)
    manager = FakeManager(look)
    return ctx, SimpleNamespace(get=lambda: manager), run, manager


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(liveness, "PROBE_PAUSE_S", 0)


def test_a_running_process_is_alive(tmp_path):
    ctx, sandboxes, run, _ = make(tmp_path, Attached(FakeLive([True])))  # type: ignore[arg-type]
    assert run_liveness(ctx, sandboxes, run) == (True, "the process is running")


def test_a_process_verifiably_not_there_is_gone(tmp_path):
    ctx, sandboxes, run, _ = make(tmp_path, Attached(FakeLive([False])))  # type: ignore[arg-type]
    alive, why = run_liveness(ctx, sandboxes, run)
    assert alive is False and "42 is not running" in why


def test_an_absent_or_stopped_sandbox_is_evidence(tmp_path):
    ctx, sandboxes, run, _ = make(tmp_path, Gone("container cairn-x is exited (exit code 137)"))
    alive, why = run_liveness(ctx, sandboxes, run)
    assert alive is False and "exited" in why


def test_a_probe_that_cannot_start_is_unknown_and_asked_again(tmp_path):
    live = FakeLive([ProbeFailed("sh: can't fork")])
    ctx, sandboxes, run, _ = make(tmp_path, Attached(live))  # type: ignore[arg-type]
    alive, why = run_liveness(ctx, sandboxes, run)
    assert alive is None and "can't fork" in why
    assert live.asked == liveness.PROBE_TRIES


def test_a_probe_that_fails_once_then_answers_is_believed(tmp_path):
    live = FakeLive([ProbeFailed("no fork"), True])
    ctx, sandboxes, run, _ = make(tmp_path, Attached(live))  # type: ignore[arg-type]
    assert run_liveness(ctx, sandboxes, run)[0] is True


@pytest.mark.parametrize(
    "error",
    [
        SandboxError("the sandbox cairn-x is paused: its processes cannot be looked at"),
        SandboxUnavailable("Docker at unix:///x did not answer"),
    ],
)
def test_a_sandbox_that_cannot_be_looked_at_is_unknown(tmp_path, error):
    ctx, sandboxes, run, manager = make(tmp_path, error)
    alive, why = run_liveness(ctx, sandboxes, run)
    assert alive is None and str(error) in why
    # An unreachable daemon is not asked again at once; anything else is.
    assert manager.looks == (1 if isinstance(error, SandboxUnavailable) else liveness.PROBE_TRIES)


def test_settle_never_ends_a_run_whose_liveness_is_unknown(tmp_path):
    ctx, sandboxes, run, _ = make(tmp_path, Attached(FakeLive([ProbeFailed("no fork")])))  # type: ignore[arg-type]
    ended: list[object] = []
    with pytest.raises(CairnError, match="unknown, left as it is"):
        settle_run(ctx, sandboxes, lambda *a, **k: ended.append(a), run)  # type: ignore[arg-type]
    assert ended == []


def test_settle_ends_a_gone_run_as_interrupted_with_the_evidence(tmp_path):
    ctx, sandboxes, run, _ = make(tmp_path, Gone("container cairn-x no longer exists"))
    ended: list[tuple] = []

    def end(run_id, code, note=None):
        ended.append((run_id, code, note))

    ctx.store.get_run = lambda run_id: SimpleNamespace(state="interrupted")
    assert settle_run(ctx, sandboxes, end, run) == "interrupted"  # type: ignore[arg-type]
    assert ended == [("r_1", None, "interrupted: the sandbox is gone (container cairn-x no "
                      "longer exists)")]  # fmt: skip


@pytest.mark.parametrize("exit_code", ["0", None])
def test_settle_brings_a_remote_workspace_back_before_it_ends_the_run(tmp_path, exit_code):
    look = Gone("container cairn-x is exited (exit code 0)")
    ctx, sandboxes, run, manager = make(tmp_path, look, exit_code=exit_code)
    steps: list[str] = []
    manager.mirror_workspace = lambda run, follow=True: (
        steps.append(f"mirror follow={follow}") or (lambda: steps.append("last pass"))
    )
    ctx.store.get_run = lambda run_id: SimpleNamespace(state="succeeded")
    settle_run(ctx, sandboxes, lambda *a, **k: steps.append("end"), run)  # type: ignore[arg-type]
    assert steps == ["mirror follow=False", "last pass", "end"]


def test_settle_ends_the_run_even_when_the_last_mirror_pass_cannot_start(tmp_path):
    ctx, sandboxes, run, manager = make(tmp_path, Attached(FakeLive([True])), exit_code="1")

    def refuse(run, follow=True):
        raise CairnError("sandbox host far cannot be reached")

    manager.mirror_workspace = refuse
    ended: list[object] = []
    ctx.store.get_run = lambda run_id: SimpleNamespace(state="failed")
    assert settle_run(ctx, sandboxes, lambda *a, **k: ended.append(a), run) == "failed"  # type: ignore[arg-type]
    assert ended == [("r_1", 1)]


# -- the Docker probe's answer --------------------------------------------------------------------


def docker_session(result: ExecResult | BaseException) -> DockerLiveSession:
    session = DockerLiveSession.__new__(DockerLiveSession)
    session.state = SimpleNamespace(container_name="cairn-ses")  # type: ignore[assignment]

    def exec_(argv, *, env=None, cwd="/", timeout=60.0):
        if isinstance(result, BaseException):
            raise result
        return result

    session.exec = exec_  # type: ignore[method-assign]
    return session


@pytest.mark.parametrize(
    ("result", "expected"),
    [(ExecResult(0, "alive\n", ""), True), (ExecResult(0, "dead\n", ""), False)],
)
def test_the_docker_probe_answers_in_words(result, expected):
    assert docker_session(result).process_alive(7, run_id="r_1.2") is expected


@pytest.mark.parametrize(
    "result",
    [
        ExecResult(2, "", "sh: 1: Cannot fork"),
        ExecResult(126, "OCI runtime exec failed: resource temporarily unavailable", ""),
        ExecResult(-1, "", ""),
    ],
)
def test_a_docker_probe_without_an_answer_is_no_verdict(result):
    with pytest.raises(ProbeFailed):
        docker_session(result).process_alive(7, run_id="r_1.2")


def test_the_probe_script_tells_attempts_apart(tmp_path):
    """The probe itself, run by the host's sh on a made-up /proc: attempt 2 is not attempt 21."""
    import subprocess

    session = docker_session(ExecResult(0, "", ""))
    captured: list[list[str]] = []

    def capture(argv, *, env=None, cwd="/", timeout=60.0):
        captured.append(list(argv))
        return ExecResult(0, "alive\n", "")

    session.exec = capture  # type: ignore[method-assign]
    session.process_alive(7, run_id="r_1.2")
    script = captured[0][2]
    sleeper = subprocess.Popen(
        ["sh", "-c", "sleep 5", "cairn-run", "/cairn/runs/r_1.21", "sh", "x"],
    )
    try:

        def probe(marker: str) -> str:
            return subprocess.run(
                ["sh", "-c", script, "sh", str(sleeper.pid), marker],
                capture_output=True, text=True,
            ).stdout.strip()  # fmt: skip

        assert probe("/cairn/runs/r_1.21") == "alive"
        assert probe("/cairn/runs/r_1.2") == "dead"
        assert probe("") == "alive"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert (
        subprocess.run(
            ["sh", "-c", script, "sh", str(sleeper.pid), ""], capture_output=True, text=True
        ).stdout.strip()
        == "dead"
    )
