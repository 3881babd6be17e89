"""Where the engine's conversation stood when each revision was recorded, and what a fork at an
older revision starts from: a transcript's last resumable message, the position noted with each
revision and checkpoint (no Docker: a real vault, a hand-written transcript), and the fork point
the ladder picks, including the fallback with a note of the files where the engine cannot cut."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from core.app import Cairn
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FALLBACK,
    MODE_FORK,
    MODE_START,
    EngineSettings,
    LaunchContext,
    ToolContract,
)
from core.engines.claude_code import (
    LAUNCH_FILE,
    ClaudeCodeEngine,
    last_position,
    transcript_path,
)
from core.engines.codex import CODEX_DIR, CodexEngine
from core.ids import new_id
from core.models import Run, SessionRecord, Task, TaskSource
from core.revisions import (
    AT_EMPTY,
    AT_LATEST,
    AT_POSITION,
    AT_UNKNOWN,
    POSITIONS,
)
from core.runs.ladder import ResumeReport

SESSION = str(uuid.uuid4())


def line(kind: str, content=None, *, sidechain: bool = False, meta: bool = False, **extra) -> dict:
    entry = {"type": kind, "uuid": str(uuid.uuid4()), "cwd": "/workspace", **extra}
    if content is not None:
        entry["message"] = {"role": kind, "content": content}
    if sidechain:
        entry["isSidechain"] = True
    if meta:
        entry["isMeta"] = True
    return entry


def prompt(text: str) -> dict:
    return line("user", text)


def tool_use(command: str) -> dict:
    return line(
        "assistant",
        [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": command}}],
    )


def tool_result() -> dict:
    return line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}])


def answer(text: str) -> dict:
    return line("assistant", [{"type": "text", "text": text}])


def write(path: Path, entries: list[dict], *, append: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")


# -- the transcript's last resumable message ------------------------------------------------------


def test_the_last_position_is_the_last_assistant_message_or_tool_result(tmp_path):
    path = tmp_path / "t.jsonl"
    first, call, result, said = prompt("make a"), tool_use("echo a"), tool_result(), answer("done")
    write(path, [{"type": "summary"}, first, call])
    assert last_position(path) == call["uuid"]
    write(path, [result], append=True)
    assert last_position(path) == result["uuid"]
    write(path, [said, {"type": "last-prompt"}], append=True)
    assert last_position(path) == said["uuid"]
    # A person's prompt, a side chain and meta lines are no place to cut the conversation at.
    write(
        path,
        [
            prompt("make b"),
            answer("subagent") | {"isSidechain": True},
            tool_result() | {"isMeta": True},
            {"type": "assistant", "uuid": "not-a-uuid"},
            "not json",
        ],
        append=True,
    )
    assert last_position(path) == said["uuid"]


def test_only_the_tail_is_read_and_a_cut_first_line_is_skipped(tmp_path):
    path = tmp_path / "t.jsonl"
    early = answer("early " + "x" * 5000)
    write(path, [early, prompt("padding " + "y" * 5000)])
    assert last_position(path, tail_bytes=6000) is None  # `early` starts before the tail
    assert last_position(path) == early["uuid"]
    assert last_position(tmp_path / "missing.jsonl") is None


def test_claude_code_reads_the_session_its_attempt_was_prepared_with(tmp_path):
    eng = ClaudeCodeEngine()
    home, run_dir = tmp_path / "home", tmp_path / "run"
    run_dir.mkdir()
    said = answer("done")
    write(transcript_path(home, "/workspace", SESSION), [prompt("hi"), said])
    assert eng.conversation_position(home, run_dir, SESSION) == (SESSION, said["uuid"])
    assert eng.conversation_position(home, run_dir, None) is None
    (run_dir / LAUNCH_FILE).write_text(json.dumps({"session_id": SESSION}))
    assert eng.conversation_position(home, run_dir, None) == (SESSION, said["uuid"])
    other = str(uuid.uuid4())
    (run_dir / LAUNCH_FILE).write_text(json.dumps({"session_id": other}))
    assert eng.conversation_position(home, run_dir, SESSION) is None  # no transcript yet


def test_codex_counts_turns_and_cannot_fork_at_one(tmp_path):
    eng = CodexEngine()
    thread = str(uuid.uuid4())
    rollout = (
        tmp_path / CODEX_DIR / "sessions/2026/12/01" / f"rollout-2026-12-01T00-00-00-{thread}.jsonl"
    )
    write(
        rollout,
        [
            {"type": "session_meta", "payload": {"id": thread, "cwd": "/workspace"}},
            {"type": "turn_context", "payload": {}},
            {"type": "response_item", "payload": {"text": '"turn_context"'}},
            {"type": "turn_context", "payload": {}},
        ],
    )
    assert eng.conversation_position(tmp_path, tmp_path, thread) == (thread, "turn 2")
    assert eng.conversation_position(tmp_path, tmp_path, None) is None
    assert eng.forks_at_position is False


def launch_ctx(tmp_path: Path, mode: str, spec: dict) -> LaunchContext:
    return LaunchContext(
        run_id="run_x",
        mode=mode,
        prompt="go on",
        spec={"prompt": "go on", "mode": mode, **spec},
        settings=EngineSettings(binary="/x/claude"),
        host_run_dir=tmp_path / "run",
        sandbox_run_dir="/cairn/runs/run_x.1",
        host_home=tmp_path / "home",
        sandbox_home="/home/agent",
    )


def test_a_fallback_on_an_older_revisions_files_says_what_they_hold(tmp_path):
    (tmp_path / "run").mkdir()
    spec = {"fallback_reason": "no position was noted", "files_note": "The files are those of r1."}
    ctx = launch_ctx(tmp_path, MODE_FALLBACK, spec)
    eng = ClaudeCodeEngine()
    eng.prepare(ctx)
    argv = eng.claude_argv(ctx)
    note = argv[argv.index("--append-system-prompt") + 1]
    assert "no position was noted" in note and "The files are those of r1." in note
    assert "as that work left them" not in note
    codex = CodexEngine().exec_args(launch_ctx(tmp_path, MODE_FALLBACK, spec))
    assert codex[-1] == "The files are those of r1.\n\ngo on"
    plain = CodexEngine().exec_args(launch_ctx(tmp_path, MODE_START, spec))
    assert plain[-1] == "go on"


# -- noting positions with revisions and checkpoints ------------------------------------------------


@pytest.fixture
def made(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    cairn = Cairn(tmp_path / "data")
    yield cairn, src
    cairn.close()


def agent_task(cairn: Cairn, src: Path, engine: str = "claude-code"):
    new = cairn.tasks.new(src, engine=engine)
    ws = new.workspace
    session = SessionRecord(new_id("session"), ws.id, "docker", None, None, None)
    cairn.ctx.store.put_session(session)
    now = time.time()
    run = Run(
        new_id("run"),
        new.task.id,
        "running",
        0,
        engine,
        {"prompt": "make a"},
        engine_session_id=SESSION if engine == "claude-code" else None,
        attempt=1,
        workspace_id=ws.id,
        created_at=now,
        started_at=now,
    )
    cairn.ctx.store.add_run(run)
    home = cairn.ctx.data.home_path(session.id)
    return new.task, ws, run, home


def capture(cairn: Cairn, task: Task, root: Path, name: str, text: str) -> str:
    (root / name).write_text(text)
    rev, changed = cairn.revisions.capture(task.id, trigger="watch")
    assert changed
    return rev.id


def test_each_revision_notes_where_the_conversation_stood(made):
    cairn, src = made
    task, ws, run, home = agent_task(cairn, src)
    transcript = transcript_path(home, "/workspace", SESSION)
    base = ws.base_revision
    call_a = tool_use("echo a > a.txt")
    write(transcript, [prompt("make a"), call_a])
    r1 = capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    said_a, call_b = answer("made a"), tool_use("echo b > b.txt")
    write(transcript, [tool_result(), said_a, prompt("make b"), call_b], append=True)
    r2 = capture(cairn, task, Path(ws.root), "b.txt", "b\n")
    write(transcript, [tool_result(), answer("made b")], append=True)
    r3 = capture(cairn, task, Path(ws.root), "c.txt", "c\n")

    positions = cairn.ctx.store.get_run(run.id).spec[POSITIONS]
    assert positions[r1]["at"] == call_a["uuid"] and positions[r1]["session_id"] == SESSION
    assert positions[r2]["at"] == call_b["uuid"]
    assert r3 in positions and base not in positions

    at = cairn.revisions.conversation_at(ws.id, r1)
    assert (at.kind, at.session_id, at.position) == (AT_POSITION, SESSION, call_a["uuid"])
    assert cairn.revisions.conversation_at(ws.id, r3).kind == AT_LATEST
    assert cairn.revisions.conversation_at(ws.id, base).kind == AT_EMPTY

    # A checkpoint that finds the files unchanged notes where the conversation went meanwhile.
    write(transcript, [prompt("remove c"), tool_use("rm c.txt")], append=True)
    root = Path(ws.root)
    (root / "c.txt").unlink()
    r4, _ = cairn.revisions.capture(task.id, trigger="watch")
    later = answer("nothing to do")
    write(transcript, [later], append=True)
    cairn.runs.checkpoints.write(
        cairn.ctx.store.get_run(run.id),
        pending_step=None,
        tool_contract=ToolContract(None),
        policy_version=1,
    )
    (root / "d.txt").write_text("d\n")
    cairn.revisions.capture(task.id, trigger="watch")
    at = cairn.revisions.conversation_at(ws.id, r4.id)
    assert (at.kind, at.position, at.recorded_with) == (AT_POSITION, later["uuid"], r4.id)


def test_a_revision_without_a_position_goes_with_the_one_before_it(made):
    cairn, src = made
    task, ws, run, home = agent_task(cairn, src)
    transcript = transcript_path(home, "/workspace", SESSION)
    said = answer("made a")
    write(transcript, [prompt("make a"), said])
    r1 = capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    # An edit recorded while the transcript is missing (the home lost): nothing is noted.
    transcript.unlink()
    r2 = capture(cairn, task, Path(ws.root), "hand.txt", "by hand\n")
    capture(cairn, task, Path(ws.root), "b.txt", "b\n")
    assert r2 not in cairn.ctx.store.get_run(run.id).spec[POSITIONS]
    at = cairn.revisions.conversation_at(ws.id, r2)
    assert (at.kind, at.position, at.recorded_with) == (AT_POSITION, said["uuid"], r1)


def test_no_position_after_the_conversation_began_is_unknown(made):
    cairn, src = made
    task, ws, run, _ = agent_task(cairn, src)  # no transcript: nothing can be noted
    r1 = capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    capture(cairn, task, Path(ws.root), "b.txt", "b\n")
    at = cairn.revisions.conversation_at(ws.id, r1)
    assert at.kind == AT_UNKNOWN and r1[:12] in at.reason
    assert cairn.revisions.conversation_at(ws.id, ws.base_revision).kind == AT_EMPTY


def test_a_shell_task_notes_nothing(made):
    cairn, src = made
    task, ws, run, _ = agent_task(cairn, src, engine="shell")
    capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    assert POSITIONS not in cairn.ctx.store.get_run(run.id).spec


# -- the fork point -----------------------------------------------------------------------------


def fork_of(cairn: Cairn, parent: Task, rev: str, engine: str) -> tuple[Run, LaunchContext]:
    """A fork child's task and run, as the ladder sees them before its engine mode is chosen."""
    child = Task(
        new_id("task"),
        "fork",
        parent.source_id,
        None,  # its own workspace, made by Tasks.fork, is not needed here
        engine,
        "try another way",
        parent.id,
        TaskSource.FORK.value,
        rev,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    run = Run(
        new_id("run"),
        child.id,
        "preparing",
        0,
        engine,
        {"prompt": "try another way", "mode": MODE_FORK, "session_id": SESSION},
        attempt=1,
        workspace_id=parent.workspace_id,
        created_at=time.time(),
    )
    cairn.ctx.store.add_run(run)
    home = Path(cairn.ctx.data.home_path(cairn.ctx.store.session_for(parent.workspace_id).id))
    ctx = LaunchContext(
        run_id=run.id,
        mode=MODE_FORK,
        prompt="try another way",
        spec=run.spec,
        settings=EngineSettings(),
        host_run_dir=home.parent / "run-dir",
        sandbox_run_dir="/cairn/runs/x",
        host_home=home,
        sandbox_home="/home/agent",
        session_id=SESSION,
    )
    return run, ctx


def three_revisions(cairn: Cairn, src: Path, engine: str):
    task, ws, run, home = agent_task(cairn, src, engine)
    transcript = transcript_path(home, "/workspace", SESSION)
    said = answer("made a")
    write(transcript, [prompt("make a"), tool_use("echo a"), tool_result(), said])
    r1 = capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    write(transcript, [prompt("make b"), answer("made b")], append=True)
    r2 = capture(cairn, task, Path(ws.root), "b.txt", "b\n")
    return task, ws, said, r1, r2


def test_a_claude_code_fork_at_an_older_revision_resumes_at_its_position(made):
    cairn, src = made
    task, ws, said, r1, r2 = three_revisions(cairn, src, "claude-code")
    ladder = cairn.runs.ladder
    run, ctx = fork_of(cairn, task, r1, "claude-code")
    report = ResumeReport(run.id)
    out = ladder._fork_point(ClaudeCodeEngine(), ctx, run, report)
    assert out.mode == MODE_FORK and out.session_id == SESSION
    assert out.spec["resume_at"] == said["uuid"]
    assert out.spec["fork_point"] == {"revision": r1, "kind": AT_POSITION}
    assert "a.txt" in out.spec["files_note"] and "b.txt" in out.spec["files_note"]
    assert report.path[0].startswith(f"conversation: as at revision {r1[:12]}")
    # The fork's first revision goes with the conversation it starts from.
    assert out.spec[POSITIONS][ws.base_revision]["at"] == said["uuid"]
    # Decided once: a relaunch of the same run keeps it.
    assert ladder._fork_point(ClaudeCodeEngine(), out, run, ResumeReport(run.id)) is out
    # At the latest revision the whole conversation goes, as before.
    run2, ctx2 = fork_of(cairn, task, r2, "claude-code")
    out2 = ladder._fork_point(ClaudeCodeEngine(), ctx2, run2, ResumeReport(run2.id))
    assert out2.mode == MODE_FORK and "resume_at" not in out2.spec
    # At the base no conversation had begun: a new session.
    run3, ctx3 = fork_of(cairn, task, ws.base_revision, "claude-code")
    out3 = ladder._fork_point(ClaudeCodeEngine(), ctx3, run3, ResumeReport(run3.id))
    assert out3.mode == MODE_START and out3.session_id is None
    assert "session_id" not in out3.spec and out3.spec["mode"] == MODE_START


def test_a_fork_where_nothing_was_noted_falls_back_with_a_note_of_the_files(made):
    cairn, src = made
    task, ws, _, r1, _ = three_revisions(cairn, src, "claude-code")
    run = cairn.ctx.store.runs_of([task.id])[0]
    cairn.ctx.store.update_run(run.id, spec={"prompt": "make a"})  # as before positions existed
    run, ctx = fork_of(cairn, task, r1, "claude-code")
    report = ResumeReport(run.id)
    out = ladder_fork_point(cairn, ClaudeCodeEngine(), ctx, run, report)
    assert out.mode == MODE_FALLBACK
    assert "no conversation position was noted" in out.spec["fallback_reason"]
    note = out.spec["files_note"]
    assert f"revision {r1[:12]}" in note and "a.txt" in note
    assert "Later work changed b.txt" in note
    assert any("fallback" in p for p in report.path)


def test_a_codex_fork_at_an_older_revision_starts_a_new_thread_and_says_why(made):
    cairn, src = made
    task, ws, _, r1, _ = three_revisions(cairn, src, "claude-code")
    # The same positions, but the task's engine is Codex, whose CLI forks whole threads only.
    cairn.ctx.store.update_task(task.id, engine="codex")
    run, ctx = fork_of(cairn, task, r1, "codex")
    report = ResumeReport(run.id)
    out = ladder_fork_point(cairn, CodexEngine(), replace(ctx, session_id=None), run, report)
    assert out.mode == MODE_FALLBACK
    assert "cannot fork a conversation at an earlier point" in out.spec["fallback_reason"]
    assert "a.txt" in out.spec["files_note"]
    assert any("fallback" in p for p in report.path), report.path
    assert CodexEngine().exec_args(replace(out, spec=out.spec))[-1].startswith("The files are")


def ladder_fork_point(cairn, eng, ctx, run, report):
    return cairn.runs.ladder._fork_point(eng, ctx, run, report)


def test_a_link_or_a_pipe_planted_for_the_transcript_is_not_read(tmp_path):
    real = tmp_path / "real.jsonl"
    write(real, [answer("elsewhere")])
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    assert last_position(link) is None
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    assert last_position(pipe) is None  # and does not wait for a writer


# -- continuing after the workspace was restored ----------------------------------------------------


def continue_of(cairn: Cairn, parent: Task, engine: str) -> tuple[Run, LaunchContext]:
    child = Task(
        new_id("task"),
        "go on",
        parent.source_id,
        parent.workspace_id,
        engine,
        "go on",
        parent.id,
        TaskSource.CONTINUE.value,
        None,
        time.time(),
    )
    cairn.ctx.store.add_task(child)
    run = Run(
        new_id("run"),
        child.id,
        "preparing",
        0,
        engine,
        {"prompt": "go on", "mode": MODE_CONTINUE, "session_id": SESSION},
        attempt=1,
        workspace_id=parent.workspace_id,
        created_at=time.time(),
    )
    cairn.ctx.store.add_run(run)
    home = Path(cairn.ctx.data.home_path(cairn.ctx.store.session_for(parent.workspace_id).id))
    ctx = LaunchContext(
        run_id=run.id,
        mode=MODE_CONTINUE,
        prompt="go on",
        spec=run.spec,
        settings=EngineSettings(),
        host_run_dir=home.parent / "run-dir",
        sandbox_run_dir="/cairn/runs/x",
        host_home=home,
        sandbox_home="/home/agent",
        session_id=SESSION,
    )
    return run, ctx


def test_a_continue_after_the_workspace_was_restored_forks_the_conversation_there(made):
    cairn, src = made
    task, ws, said, r1, _ = three_revisions(cairn, src, "claude-code")
    for run in cairn.ctx.store.runs_of([task.id]):
        cairn.ctx.store.update_run(run.id, state="succeeded")
    ladder = cairn.runs.ladder
    # Without a restore the conversation goes on as it is.
    run, ctx = continue_of(cairn, task, "claude-code")
    assert ladder._continue_point(ClaudeCodeEngine(), ctx, run, ResumeReport(run.id)) is ctx
    cairn.ctx.store.update_run(run.id, state="succeeded")

    cairn.restores.restore(task.id, r1)
    run, ctx = continue_of(cairn, task, "claude-code")
    report = ResumeReport(run.id)
    out = ladder._continue_point(ClaudeCodeEngine(), ctx, run, report)
    assert out.mode == MODE_FORK and out.session_id == SESSION
    assert out.spec["resume_at"] == said["uuid"] and out.spec["mode"] == MODE_FORK
    assert report.path[0].startswith("conversation: as before the workspace was restored")
    assert f"revision {r1[:12]}" in out.spec["files_note"]
    assert "Later work changed b.txt" in out.spec["files_note"]
    cairn.ctx.store.update_run(run.id, state="succeeded")
    forked = run

    # Codex cannot cut its thread there: a new thread, and the note says what the files hold.
    run, ctx = continue_of(cairn, task, "codex")
    report = ResumeReport(run.id)
    out = ladder._continue_point(CodexEngine(), ctx, run, report)
    assert out.mode == MODE_FALLBACK
    assert "cannot fork a conversation at an earlier point" in out.spec["fallback_reason"]
    assert f"restored the files of revision {r1[:12]}" in out.spec["fallback_reason"]
    assert any("fallback" in p for p in report.path)
    cairn.ctx.store.update_run(run.id, state="succeeded")

    # Once a run has launched on the restored files, the conversation goes on from there.
    cairn.runs.checkpoints.write(
        forked, pending_step=None, tool_contract=ToolContract(None), policy_version=1
    )
    again, again_ctx = continue_of(cairn, task, "claude-code")
    assert ladder._continue_point(ClaudeCodeEngine(), again_ctx, again, ResumeReport("x")) is (
        again_ctx
    )
    cairn.ctx.store.update_run(again.id, state="succeeded")
    # A fork at the restore, later on, starts from the conversation of the files it put back.
    (Path(ws.root) / "e.txt").write_text("e\n")
    cairn.revisions.capture(task.id, trigger="watch")
    restore = cairn.ctx.store.list_revisions(ws.id)[-2]
    at = cairn.revisions.conversation_at(ws.id, restore.id)
    assert (at.kind, at.position) == (AT_POSITION, said["uuid"])
    assert f"restored the files of revision {r1[:12]}" in at.reason


def test_a_continue_after_restoring_one_file_to_a_mix_goes_on_as_it_is(made):
    cairn, src = made
    task, ws, _, r1, _ = three_revisions(cairn, src, "claude-code")
    (Path(ws.root) / "a.txt").write_text("changed\n")
    (Path(ws.root) / "b.txt").write_text("changed\n")
    cairn.revisions.capture(task.id, trigger="watch")
    for run in cairn.ctx.store.runs_of([task.id]):
        cairn.ctx.store.update_run(run.id, state="succeeded")
    cairn.restores.restore(task.id, r1, ["a.txt"])
    run, ctx = continue_of(cairn, task, "claude-code")
    assert (
        cairn.runs.ladder._continue_point(ClaudeCodeEngine(), ctx, run, ResumeReport(run.id)) is ctx
    )


def test_a_codex_fork_at_an_older_revision_is_native_while_its_thread_has_not_moved(made):
    cairn, src = made
    task, ws, run, home = agent_task(cairn, src, "codex")
    thread = str(uuid.uuid4())
    cairn.ctx.store.update_run(run.id, engine_session_id=thread)
    rollout = (
        home / CODEX_DIR / "sessions/2026/12/01" / f"rollout-2026-12-01T00-00-00-{thread}.jsonl"
    )
    write(rollout, [{"type": "session_meta", "payload": {"id": thread}}, {"type": "turn_context"}])
    r1 = capture(cairn, task, Path(ws.root), "a.txt", "a\n")
    (Path(ws.root) / "hand.txt").write_text("by hand\n")  # a later edit, no new turn
    cairn.revisions.capture(task.id, trigger="external")
    run1, ctx1 = fork_of(cairn, task, r1, "codex")
    report = ResumeReport(run1.id)
    out = ladder_fork_point(cairn, CodexEngine(), replace(ctx1, session_id=thread), run1, report)
    assert out.mode == MODE_FORK and out.session_id == thread and "resume_at" not in out.spec
    assert "unchanged since" in report.path[0]
    # Once the thread has another turn, a fork there can no longer be native.
    write(rollout, [{"type": "turn_context"}], append=True)
    run2, ctx2 = fork_of(cairn, task, r1, "codex")
    out2 = ladder_fork_point(cairn, CodexEngine(), ctx2, run2, ResumeReport(run2.id))
    assert out2.mode == MODE_FALLBACK and "turn 1" in out2.spec["fallback_reason"]


def test_a_fork_at_another_tasks_revision_keeps_the_parents_conversation(made):
    cairn, src = made
    task, ws, _, _, _ = three_revisions(cairn, src, "claude-code")
    run, ctx = fork_of(cairn, task, "f" * 40, "claude-code")
    report = ResumeReport(run.id)
    out = ladder_fork_point(cairn, ClaudeCodeEngine(), ctx, run, report)
    assert out.mode == MODE_FORK and out.session_id == SESSION and "resume_at" not in out.spec
    assert "not one of the parent's workspace" in report.notes[0]
