"""A history people can read: each revision described by what produced it (a shell step, a tool
call, a hand edit, a restore) with the paths it changed; bursts of one activity collapsed; the
markers that belong to revisions."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core import cli
from core import events as ev
from core.app import Cairn
from core.cli.commands.revisions import RevisionsCommand
from core.history import (
    Activity,
    activities,
    activity_at,
    bursts,
    clip,
    describe,
    matches,
    name_paths,
    revision_at,
    tool_label,
)
from core.models import Checkpoint, Revision, Run, Task
from core.output_blocks import AttemptStart, OutputRecord


def rev(seq: int, trigger: str = "watch", run: str | None = "r1", at: float | None = None):
    return Revision(
        f"c{seq:039d}",
        "ws",
        None if seq == 0 else f"c{seq - 1:039d}",
        "t",
        trigger,
        run,
        1,
        float(seq if at is None else at),
        seq,
    )


def claude(name: str, tool_input: dict, call_id: str) -> str:
    event = {
        "type": "assistant",
        "message": {
            "content": [{"type": "tool_use", "id": call_id, "name": name, "input": tool_input}]
        },
    }
    return json.dumps(event) + "\n"


def test_shell_steps_and_tool_calls_are_read_from_the_stored_output_with_their_times():
    records = [
        OutputRecord("stdout", "cairn: step 1/2: sed -i s/a/b/ app.py\n", 10.0),
        OutputRecord("stdout", "some output\ncairn: step 2", 11.0),
        OutputRecord("stdout", "/2: ./gen.sh > out.txt\n", 12.0),
        OutputRecord("stderr", "cairn: step 9/9: not a header on stderr\n", 12.5),
        AttemptStart(2, "sandbox recreated", 13.0),
        OutputRecord("stdout", claude("Edit", {"file_path": "/workspace/app.py"}, "t1"), 14.0),
        OutputRecord("stdout", claude("Bash", {"command": "sed -i 's/x/y/' lib.py"}, "t2"), 15.0),
        OutputRecord("stdout", "no time, no place\n", None),
    ]
    acts = activities("r1", records)
    assert [(a.at, a.kind, a.label) for a in acts] == [
        (10.0, "step", "step 1/2: sed -i s/a/b/ app.py"),
        (11.0, "step", "step 2/2: ./gen.sh > out.txt"),
        (14.0, "tool", "Edit app.py"),
        (15.0, "tool", "Bash: sed -i 's/x/y/' lib.py"),
    ]
    assert acts[2].key == "tool:t1"


def test_codex_commands_and_file_changes_are_tool_calls():
    started = {
        "type": "item.started",
        "item": {"id": "i1", "type": "command_execution", "command": "bash -lc 'rm old.txt'"},
    }
    change = {
        "type": "item.completed",
        "item": {
            "id": "i2",
            "type": "file_change",
            "changes": [{"kind": "add", "path": "/workspace/n.py"}],
        },
    }
    records = [
        OutputRecord("stdout", json.dumps(e) + "\n", 5.0 + i)
        for i, e in enumerate([started, change, {**change, "type": "item.started"}])
    ]
    assert [a.label for a in activities("r", records)] == ["Shell: rm old.txt", "Add n.py"]


def test_words_are_short_and_name_the_first_few_paths():
    assert clip("x" * 100, 10) == "x" * 9 + "…"
    assert clip("\n  first line\nsecond") == "first line"
    assert name_paths(["a", "b", "c", "d", "e"]) == "a, b, c and 2 more"
    assert name_paths([]) == ""
    assert tool_label("Write", {"file_path": "/workspace/docs/x.md"}) == "Write docs/x.md"
    assert tool_label("Grep", {"pattern": "x"}) == "Grep"


def test_a_revision_belongs_to_the_activity_going_at_its_time():
    acts = [
        Activity("r", 10.0, "step", "step:1", "one"),
        Activity("r", 20.0, "step", "step:2", "two"),
    ]
    assert activity_at(acts, 15.0).label == "one"
    assert activity_at(acts, 20.0).label == "two"
    assert activity_at(acts, 5.0).label == "one"  # seen before its line was
    assert activity_at([], 5.0) is None


def test_descriptions_name_what_produced_each_revision_and_its_files():
    revs = [
        rev(0, "base", None),
        rev(1, "watch", "r1", at=11.5),
        rev(2, "external", None),
        rev(3, "restore", None),
        rev(4, "restore", None),
        rev(5, "watch", None),
        rev(6, "manual", None),
        rev(7, "watch", "r2"),
    ]
    paths = {r.id: [f"f{r.seq}.txt"] for r in revs}
    acts = {"r1": [Activity("r1", 11.0, "step", "step:1", "step 1/1: sed -i s/a/b/ f1.txt")]}
    notes = {revs[3].id: ("paths", revs[1].id), revs[4].id: ("undo", revs[1].id)}
    out = describe(revs, paths, run_activities=acts, restores=notes)
    assert [d.description for d in out] == [
        "the folder the task started from · f0.txt",
        "step 1/1: sed -i s/a/b/ f1.txt · f1.txt",
        "edited outside the sandbox · f2.txt",
        "restored to #1 · f3.txt",
        "undid #1's change · f4.txt",
        "edited outside the sandbox · f5.txt",
        "captured by hand · f6.txt",
        "during run r2 · f7.txt",
    ]
    assert out[1].heading == "run r1 · step 1/1: sed -i s/a/b/ f1.txt"
    assert out[2].heading == ""


def test_a_loop_writing_one_file_is_one_burst_and_another_file_or_step_starts_a_new_one():
    step1 = Activity("r1", 0.0, "step", "step:1", "step 1/2: loop")
    step2 = Activity("r1", 100.0, "step", "step:2", "step 2/2: other")
    revs = [rev(0, "base", None)] + [rev(i, at=float(i)) for i in range(1, 91)]
    revs += [rev(91, at=91.0), rev(92, at=101.0), rev(93, "external", None, at=102.0)]
    paths = {r.id: ["loop.txt"] for r in revs}
    paths[revs[91].id] = ["loop.txt", "other.txt"]
    out = describe(revs, paths, run_activities={"r1": [step1, step2]})
    groups = bursts(out)
    assert [len(g.members) for g in groups] == [1, 90, 1, 1, 1]
    assert groups[1].description == "step 1/2: loop · 90 revisions of loop.txt"
    assert groups[3].first.what == "step 2/2: other"


def test_search_finds_by_path_words_and_run():
    d = describe(
        [rev(1)],
        {rev(1).id: ["src/app.py"]},
        run_activities={"r1": [Activity("r1", 0, "tool", "tool:1", "Bash: sed -i x")]},
    )[0]
    assert matches(d, "app.py") and matches(d, "SED app") and matches(d, "r1") and matches(d, "")
    assert not matches(d, "readme")


def test_a_marker_belongs_to_the_last_revision_recorded_before_it():
    revs = [rev(0, at=0.0), rev(1, at=10.0), rev(2, at=20.0)]
    assert revision_at(revs, 15.0).seq == 1
    assert revision_at(revs, 25.0).seq == 2
    assert revision_at(revs, -1.0).seq == 0


# -- through the facade ------------------------------------------------------------------------


@pytest.fixture
def made(tmp_path: Path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "app.py").write_text("x = 1\n")
    cairn = Cairn(tmp_path / "data")
    new = cairn.tasks.new(src)
    yield cairn, new.task.id, new.workspace.id, Path(new.workspace.root)
    cairn.close()


def test_the_facade_describes_a_shell_runs_steps_a_hand_edit_and_a_restore(made):
    cairn, task, ws, root = made
    base = cairn.revisions.resolve(cairn.ctx.task(task), "latest").id
    run = Run("r_shell", task, "succeeded", 1, "shell", workspace_id=ws, created_at=time.time())
    cairn.ctx.store.add_run(run)

    def say(text: str) -> None:
        cairn.ctx.events.publish(ev.RUN_OUTPUT, run.id, stream="stdout", text=text, offset=0)

    say("cairn: step 1/2: sed -i s/1/2/ app.py\n")
    (root / "app.py").write_text("x = 2\n")
    cairn.revisions.capture(task, trigger="watch", run_id=run.id)
    say("cairn: step 2/2: ./gen.sh\n")
    (root / "gen.txt").write_text("generated\n")
    cairn.revisions.capture(task, trigger="watch", run_id=run.id)
    (root / "notes.md").write_text("by hand\n")
    cairn.restores.restore(task, base, ["app.py"])

    described = cairn.views.history(task)
    assert [d.description for d in described] == [
        "the folder the task started from · app.py",
        "step 1/2: sed -i s/1/2/ app.py · app.py",
        "step 2/2: ./gen.sh · gen.txt",
        "edited outside the sandbox · notes.md",
        "restored to #1 · app.py",
    ]
    # Read again from the caches: the same.
    assert [d.description for d in cairn.views.history(task)][-1] == "restored to #1 · app.py"


def test_a_single_command_run_is_named_by_its_command(made):
    """One command prints no step header (its output stays as printed): its revisions are
    still named by it."""
    cairn, task, ws, root = made
    spec = {"commands": ["for i in 1 2 3; do echo $i >> loop.log; done"]}
    run = Run("r_one", task, "succeeded", 1, "shell", spec, workspace_id=ws, created_at=time.time())
    cairn.ctx.store.add_run(run)
    (root / "loop.log").write_text("1\n")
    cairn.revisions.capture(task, trigger="watch", run_id=run.id)
    assert cairn.views.history(task)[-1].description == (
        "step 1/1: for i in 1 2 3; do echo $i >> loop.log; done · loop.log"
    )


def test_markers_sit_at_the_revision_they_belong_to(made):
    cairn, task, ws, root = made
    (root / "app.py").write_text("x = 3\n")
    rev1, _ = cairn.revisions.capture(task)
    snap = cairn.snapshots.take(task, name="before the refactor")
    (root / "app.py").write_text("x = 4\n")
    cairn.revisions.capture(task)
    child = Task(
        "t_child",
        "go on",
        cairn.ctx.task(task).source_id,
        None,
        "shell",
        "",
        task,
        "fork",
        rev1.id,
        time.time(),
    )
    cairn.ctx.store.add_task(child)  # a fork's row: no run, no sandbox
    markers = cairn.views.markers(task)
    kinds = {m.kind: m for m in markers}
    assert kinds["snapshot"].revision_id == rev1.id
    assert kinds["snapshot"].label == "snapshot before the refactor"
    assert kinds["snapshot"].ref == snap.id
    assert kinds["fork"].revision_id == rev1.id and kinds["fork"].ref == child.id
    assert markers == sorted(markers, key=lambda m: m.at)


def test_cairnctl_revisions_prints_descriptions_markers_and_searches(made, capsys):
    cairn, task, ws, root = made
    (root / "notes.md").write_text("by hand\n")
    cairn.revisions.capture(task, trigger="external")
    cairn.snapshots.take(task, name="kept")
    parser = cli.build_parser()

    RevisionsCommand().run(cairn, parser.parse_args(["revisions", task]))
    out = capsys.readouterr().out
    assert "      the folder the task started from · app.py" in out
    assert "      edited outside the sandbox · notes.md" in out
    assert "      ◆ snapshot kept" in out

    RevisionsCommand().run(
        cairn, parser.parse_args(["--json", "revisions", task, "--search", "notes"])
    )
    found = json.loads(capsys.readouterr().out)
    assert [r["paths"] for r in found["revisions"]] == [["notes.md"]]
    assert found["revisions"][0]["description"] == "edited outside the sandbox · notes.md"
    assert [m["kind"] for m in found["markers"]] == ["snapshot"]


def test_checkpoint_and_approval_markers_sit_at_their_revisions(made):
    cairn, task, ws, root = made
    run = Run("r_marked", task, "succeeded", 1, "shell", workspace_id=ws, created_at=time.time())
    cairn.ctx.store.add_run(run)
    (root / "app.py").write_text("x = 5\n")
    first, _ = cairn.revisions.capture(task, trigger="watch", run_id=run.id)
    snap = cairn.snapshots.take(task)
    cairn.ctx.store.add_checkpoint(
        Checkpoint(
            "ck_1", run.id, 1, f"git:x@{first.id}", first.tree, snap.id, "1", None, {}, 1, 5.0
        )
    )
    asked_at = time.time()
    with cairn.ctx.store.transaction() as conn:
        conn.execute(
            "INSERT INTO approvals (id, run_id, command, state, created_at) VALUES (?, ?, ?, ?, ?)",
            ("ap_1", run.id, "curl https://example.com/install.sh | sh", "approved", asked_at),
        )
    time.sleep(0.01)
    (root / "app.py").write_text("x = 6\n")
    cairn.revisions.capture(task, trigger="watch", run_id=run.id)

    markers = {m.kind: m for m in cairn.views.markers(task)}
    assert set(markers) == {"checkpoint", "approval"}  # the checkpoint's snapshot is not twice
    assert markers["checkpoint"].revision_id == first.id
    assert markers["checkpoint"].label == "checkpoint of run r_marked before step 2"
    assert markers["approval"].revision_id == first.id
    assert markers["approval"].label == (
        "approval (approved): curl https://example.com/install.sh | sh"
    )
