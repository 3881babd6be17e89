"""One pass of the detached judge (core.approvals._judge_pass) over runs some of which are on
other machines: each run's mailbox is exchanged at most every REMOTE_SYNC_S, a host slow to
answer is asked less often so the others' requests are not held up, a decision goes at once,
and a failure to exchange never keeps the local mailboxes from being judged."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from core import approvals
from core.errors import CairnError


@dataclass
class FakeRun:
    id: str
    state: str = "running"


@dataclass
class FakeApproval:
    run_id: str
    state: str


@dataclass
class FakeJudge:
    runs: list[FakeRun]
    slow: set[str] = field(default_factory=set)
    synced: list[str] = field(default_factory=list)
    polls: int = 0
    decisions: list[FakeApproval] = field(default_factory=list)
    broken: bool = False

    def _runs_in_flight(self) -> list[FakeRun]:
        return self.runs

    def sync_remote(self, runs, *, force: bool = False) -> None:
        if self.broken:
            raise CairnError("the sandbox host settings cannot be read")
        for run in runs:
            self.synced.append(run.id)
            if run.id in self.slow:
                time.sleep(0.05)

    def poll(self) -> list[FakeApproval]:
        self.polls += 1
        made, self.decisions = self.decisions, []
        return made


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(approvals, "REMOTE_SYNC_S", 0.0)
    monkeypatch.setattr(approvals, "REMOTE_SLOW_S", 0.02)
    monkeypatch.setattr(approvals, "REMOTE_SLOW_BACKOFF_S", 60.0)


def test_a_slow_host_is_asked_less_often_and_the_others_as_often_as_ever():
    judge = FakeJudge([FakeRun("r_slow"), FakeRun("r_fast")], slow={"r_slow"})
    exchanged: dict[str, float] = {}
    for _ in range(3):
        approvals._judge_pass(judge, exchanged)  # type: ignore[arg-type]
    assert judge.synced.count("r_slow") == 1 and judge.synced.count("r_fast") == 3
    assert judge.polls == 3


def test_the_runs_with_a_decision_are_exchanged_again_at_once():
    judge = FakeJudge([FakeRun("r_1"), FakeRun("r_2")])
    judge.decisions = [FakeApproval("r_2", "approved"), FakeApproval("r_1", "pending")]
    approvals._judge_pass(judge, {})  # type: ignore[arg-type]
    assert judge.synced == ["r_1", "r_2", "r_2"]


def test_runs_no_longer_in_flight_are_forgotten():
    judge = FakeJudge([FakeRun("r_1")])
    exchanged = {"r_old": 1.0}
    approvals._judge_pass(judge, exchanged)  # type: ignore[arg-type]
    assert set(exchanged) == {"r_1"}


def test_a_failed_exchange_still_judges_the_local_mailboxes(caplog):
    judge = FakeJudge([FakeRun("r_1")], broken=True)
    approvals._judge_pass(judge, {})  # type: ignore[arg-type]
    assert judge.polls == 1
    assert "could not be exchanged" in caplog.text
