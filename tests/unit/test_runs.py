"""Run states and exactly-once observation of a run's output."""

import time

import pytest

from core.errors import IllegalTransition
from core.models import Run, Source, Task
from core.models import RunState as R
from core.runs import OutputTail, RunFiles, output_of
from core.runs import states as runs
from core.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "cairn.db")
    s.add_source(Source("src_1", "/r", "plain", "/v", 1.0))
    s.add_task(Task("t_1", "t", "src_1", None, "shell", "", None, "new", None, 1.0))
    s.add_run(Run("r_1", "t_1", "queued", 0, "shell", {}, created_at=time.time()))
    return s


def test_state_versions_grow_with_every_move(store):
    for target in (
        R.PREPARING,
        R.RUNNING,
        R.WAITING_APPROVAL,
        R.RUNNING,
        R.INTERRUPTED,
        R.PREPARING,
        R.RUNNING,
        R.SUCCEEDED,
    ):
        run = runs.move(store, "r_1", target)
    assert run.state == "succeeded" and run.state_version == 8 and run.ended_at


def test_finished_runs_are_final(store):
    runs.move(store, "r_1", R.CANCELLED)
    with pytest.raises(IllegalTransition, match="cancelled"):
        runs.move(store, "r_1", R.PREPARING)


def test_every_in_flight_state_can_be_interrupted_and_only_interrupted_resumes():
    for state in R:
        if state.in_flight:
            assert R.INTERRUPTED in runs.TRANSITIONS[state]
    assert {s for s, t in runs.TRANSITIONS.items() if R.PREPARING in t} == {R.QUEUED, R.INTERRUPTED}


def test_output_is_taken_once_by_complete_lines(store, tmp_path):
    files = RunFiles(tmp_path / "run")
    files.folder.mkdir()
    tail = OutputTail(store, "r_1", files)
    files.stdout.write_bytes(b"one\ntw")
    tail.poll()
    assert output_of(store, "r_1") == "one\n"
    with open(files.stdout, "ab") as f:
        f.write(b"o\nthree")
    # A second observer (another process after a restart) starts from the saved offset.
    OutputTail(store, "r_1", files).poll()
    tail.poll()
    assert output_of(store, "r_1") == "one\ntwo\n"
    tail.poll(final=True)
    assert output_of(store, "r_1") == "one\ntwo\nthree"
    assert store.get_run("r_1").output_offset == len(b"one\ntwo\nthree")


def test_stderr_is_kept_apart(store, tmp_path):
    files = RunFiles(tmp_path / "run")
    files.folder.mkdir()
    files.stdout.write_text("out\n")
    files.stderr.write_text("err\n")
    OutputTail(store, "r_1", files).poll()
    assert output_of(store, "r_1", "stdout") == "out\n"
    assert output_of(store, "r_1", "stderr") == "err\n"
