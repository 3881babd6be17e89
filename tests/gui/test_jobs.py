"""Background jobs bring values and errors back on the GUI thread, drop stale results, serialise
writes, and never fail silently."""

from __future__ import annotations

import threading
import time

import pytest

from core.errors import CairnError, Conflict
from gui.errors import describe_error, is_keyring_problem
from gui.jobs import JobFailure, JobRunner
from gui.qt import QThread, QWidget


@pytest.fixture
def runner(qtbot):
    jobs = JobRunner()
    yield jobs
    jobs.shutdown()


def gui_thread():
    from gui.qt import QApplication

    return QApplication.instance().thread()


def test_work_runs_off_the_gui_thread_and_the_result_comes_back_on_it(qtbot, runner):
    seen = {}

    def work():
        seen["work_thread"] = QThread.currentThread()
        return 42

    def done(value):
        seen["value"] = value
        seen["callback_thread"] = QThread.currentThread()

    runner.job(work, parent=runner).success(done).run()
    qtbot.waitUntil(lambda: "value" in seen)
    assert seen["value"] == 42
    assert seen["work_thread"] is not gui_thread()
    assert seen["callback_thread"] is gui_thread()
    assert runner.idle()


def test_an_error_comes_back_as_a_value(qtbot, runner):
    failures: list[JobFailure] = []

    def work():
        raise Conflict("run r_1 of this task's lineage is running", hint="stop it first")

    runner.job(work, what="start the run", parent=runner).failure(failures.append).run()
    qtbot.waitUntil(lambda: bool(failures))
    failure = failures[0]
    assert isinstance(failure.error, Conflict)
    assert failure.sentence() == (
        "Could not start the run: run r_1 of this task's lineage is running (stop it first)"
    )
    assert "Traceback" in failure.details


def test_a_failure_without_a_handler_is_emitted_not_swallowed(qtbot, runner):
    with qtbot.waitSignal(runner.sig_failed, timeout=5000) as blocker:
        runner.job(lambda: 1 / 0, what="divide", parent=runner).run()
    assert blocker.args[0].sentence() == "Could not divide: ZeroDivisionError: division by zero"


def test_a_broken_success_handler_is_reported_too(qtbot, runner):
    def broken(_value):
        raise ValueError("bad widget state")

    with qtbot.waitSignal(runner.sig_failed, timeout=5000) as blocker:
        runner.job(lambda: 1, what="load", parent=runner).success(broken).run()
    assert "bad widget state" in blocker.args[0].sentence()


def test_a_stale_result_for_an_old_selection_is_dropped(qtbot, runner):
    release_first = threading.Event()
    shown: list[str] = []
    finished: list[str] = []

    def slow_old():
        release_first.wait(5)
        return "old task"

    runner.job(slow_old, key="task-view", parent=runner).success(shown.append).finished(
        lambda: finished.append("old")
    ).run()
    runner.job(lambda: "new task", key="task-view", parent=runner).success(shown.append).finished(
        lambda: finished.append("new")
    ).run()
    qtbot.waitUntil(lambda: shown == ["new task"])
    release_first.set()
    qtbot.waitUntil(runner.idle)
    qtbot.wait(50)
    assert shown == ["new task"]  # the old result arrived later and was not painted
    assert finished == ["new"]


def test_a_stale_error_is_dropped_as_well(qtbot, runner):
    release = threading.Event()
    errors: list[JobFailure] = []

    def fails_late():
        release.wait(5)
        raise CairnError("old selection failed")

    runner.job(fails_late, key="k", parent=runner).failure(errors.append).run()
    runner.supersede("k")  # the selection was cleared
    release.set()
    qtbot.waitUntil(runner.idle)
    with qtbot.assertNotEmitted(runner.sig_failed, wait=50):
        pass
    assert errors == []


def test_different_keys_do_not_supersede_each_other(qtbot, runner):
    got = []
    runner.job(lambda: "a", key="one", parent=runner).success(got.append).run()
    runner.job(lambda: "b", key="two", parent=runner).success(got.append).run()
    qtbot.waitUntil(lambda: sorted(got) == ["a", "b"])


def test_writes_never_overlap(qtbot, runner):
    active = []
    overlaps = []
    lock = threading.Lock()

    def write(i):
        with lock:
            active.append(i)
            if len(active) > 1:
                overlaps.append(list(active))
        time.sleep(0.02)
        with lock:
            active.remove(i)
        return i

    done = []
    for i in range(8):
        runner.job(lambda i=i: write(i), write=True, parent=runner).success(done.append).run()
    qtbot.waitUntil(lambda: len(done) == 8, timeout=10_000)
    assert overlaps == []
    assert done == list(range(8))  # and they run in the order they were asked for


def test_reads_run_in_parallel(qtbot, runner):
    barrier = threading.Barrier(2, timeout=5)
    done = []
    for _ in range(2):
        runner.job(lambda: barrier.wait() is not None, parent=runner).success(done.append).run()
    qtbot.waitUntil(lambda: len(done) == 2)


def test_a_destroyed_parent_drops_the_result(qtbot, runner):
    widget = QWidget()
    release = threading.Event()
    got = []
    runner.job(lambda: release.wait(5), parent=widget).success(got.append).run()
    widget.deleteLater()
    qtbot.waitUntil(lambda: not _alive(widget))
    release.set()
    qtbot.waitUntil(runner.idle)
    assert got == []


def _alive(obj) -> bool:
    from gui.qt import is_alive

    return is_alive(obj)


def test_busy_count_is_signalled(qtbot, runner):
    counts = []
    runner.sig_busy.connect(counts.append)
    runner.job(lambda: None, parent=runner).run()
    qtbot.waitUntil(runner.idle)
    assert counts[0] == 1 and counts[-1] == 0


def test_after_shutdown_nothing_is_delivered_and_nothing_new_starts(qtbot):
    runner = JobRunner()
    got = []
    runner.job(lambda: time.sleep(0.05) or "late", parent=runner).success(got.append).run()
    assert runner.shutdown()
    qtbot.wait(50)
    assert got == []
    ran = []
    runner.job(lambda: ran.append(1), parent=runner).run()  # a timer firing while the window closes
    qtbot.wait(50)
    assert ran == [] and runner.idle()


def test_error_descriptions_are_one_line_for_people():
    assert (
        describe_error(CairnError("no such task", hint="see cairnctl tasks"))
        == "no such task (see cairnctl tasks)"
    )
    assert (
        describe_error(PermissionError(13, "Permission denied", "/x")) == "Permission denied (/x)"
    )
    assert describe_error(RuntimeError("first\nsecond")) == "RuntimeError: first"


def test_keyring_problems_are_recognised_by_their_type():
    from core.credentials import KeyringLocked, KeyringUnavailable

    assert is_keyring_problem(KeyringLocked("Prompt dismissed"))
    assert is_keyring_problem(KeyringUnavailable("no D-Bus session"))
    assert not is_keyring_problem(CairnError("other"))


def test_the_work_and_its_closure_are_released_on_the_gui_thread(qtbot, runner):
    # A closure may hold the last reference to a Qt object: freeing it on a pool thread would
    # stop the object's timers from the wrong thread and crash the event loop later.
    released_on: list[str] = []

    class Held:
        def __del__(self):
            released_on.append(threading.current_thread().name)

    def submit():
        held = Held()
        runner.job(lambda: held is not None, parent=runner).run()

    submit()
    qtbot.waitUntil(runner.idle)
    qtbot.waitUntil(lambda: bool(released_on))
    assert released_on == [threading.main_thread().name]


def test_observers_do_not_count_as_work(qtbot, runner):
    """Following a run lasts as long as the run: the status bar's "Working…" is for real work."""
    counts = []
    runner.sig_busy.connect(counts.append)
    release = threading.Event()
    runner.job(lambda: release.wait(5), observe=True, parent=runner).run()
    assert runner.pending == 1 and runner.working == 0 and counts == [0]
    runner.job(lambda: None, parent=runner).run()
    qtbot.waitUntil(lambda: runner.pending == 1)
    assert counts[1] == 1 and counts[-1] == 0
    release.set()
    qtbot.waitUntil(runner.idle)


def test_a_prompt_answer_does_not_queue_behind_read_jobs_that_wait(qtbot, runner):
    """Every read thread waiting on something slow (a busy Docker engine, say) does not keep a
    dropped folder from being looked at: such a job has threads of its own."""
    from gui.jobs import READ_THREADS

    release = threading.Event()
    answers = []
    for _ in range(READ_THREADS + 2):
        runner.job(lambda: release.wait(30), what="check the sandboxes", parent=runner).run()
    try:
        runner.job(
            lambda: "a folder", prompt=True, what="look at the dropped items", parent=runner
        ).success(answers.append).run()
        qtbot.waitUntil(lambda: answers == ["a folder"], timeout=5_000)
        waiting = runner.in_flight()
        assert len(waiting) == READ_THREADS + 2
        assert all(w.startswith("check the sandboxes (") for w in waiting)
    finally:
        release.set()
    qtbot.waitUntil(runner.idle, timeout=10_000)
