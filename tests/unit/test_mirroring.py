"""The workspace mirror of a followed run (core.sandboxes.Mirroring): a run on another machine
gets its last full pass at its end even when no mirror ran then (its host did not answer at
the last try), and that pass is made once."""

from __future__ import annotations

from collections.abc import Callable

from core.context import Lazy
from core.errors import CairnError
from core.models import Run
from core.sandboxes import Mirroring


class FakeManager:
    """mirror_workspace as SandboxManager answers it: None while the host does not answer."""

    def __init__(self) -> None:
        self.answers = False
        self.asked: list[bool] = []  # the `follow` of each call
        self.passes = 0

    def mirror_workspace(self, run: Run, *, follow: bool = True) -> Callable[[], None] | None:
        self.asked.append(follow)
        if not self.answers:
            return None

        def stop() -> None:
            self.passes += 1

        return stop


def mirroring(manager: FakeManager) -> Mirroring:
    return Mirroring(Lazy(lambda: manager))  # type: ignore[arg-type]


def run() -> Run:
    return Run.__new__(Run)  # only passed through


def test_a_run_ending_while_no_mirror_runs_still_gets_its_last_pass():
    manager = FakeManager()
    m = mirroring(manager)
    m.ensure(run())  # the host does not answer: nothing runs
    assert manager.asked == [True]
    manager.answers = True  # it answers again, and the run ends before the next try
    m.stop()
    assert manager.asked == [True, False] and manager.passes == 1
    m.stop()  # the follower stops it again on its way out: nothing more
    assert manager.asked == [True, False] and manager.passes == 1


def test_a_running_mirror_is_stopped_with_its_own_last_pass():
    manager = FakeManager()
    manager.answers = True
    m = mirroring(manager)
    m.ensure(run())
    m.stop()
    m.stop()
    assert manager.asked == [True] and manager.passes == 1


def test_a_host_still_not_answering_at_the_end_is_a_warning_not_a_failure(caplog):
    manager = FakeManager()
    m = mirroring(manager)
    m.ensure(run())

    def refuse(run: Run, *, follow: bool = True) -> None:
        raise CairnError("sandbox host far cannot be reached: no route")

    manager.mirror_workspace = refuse  # type: ignore[method-assign]
    m.stop()
    assert "could not start" in caplog.text


def test_nothing_is_asked_at_the_end_of_a_follow_that_never_saw_its_run():
    manager = FakeManager()
    mirroring(manager).stop()
    assert manager.asked == []
