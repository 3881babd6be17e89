"""The tool contract a run records: a tool is "missing" only when the sandbox says so, and a probe
that fails for a passing reason (a fork refused at the process limit) is tried again instead of
being recorded as a changed tool."""

from __future__ import annotations

import pytest

from core.errors import CairnError
from core.runs import ladder
from core.runs.ladder import Ladder
from core.sandbox.base import ExecResult


class Live:
    """A sandbox whose `exec` answers from a list, one answer per call."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = 0

    def exec(self, argv, *, env=None, cwd="/", timeout=60.0):
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(ladder, "PROBE_RETRY_S", 0)


def test_a_passing_failure_is_tried_again_and_the_version_recorded():
    live = Live(
        [
            ExecResult(2, "", "sh: 1: Cannot fork: Resource temporarily unavailable"),
            ExecResult(0, "git version 2.39.5\n", ""),
        ]
    )
    assert Ladder._probe_tool(live, "git", ["git", "--version"]) == "git version 2.39.5"
    assert live.calls == 2


def test_a_tool_the_sandbox_does_not_have_is_missing_at_once():
    live = Live([ExecResult(127, "", "sh: 1: git: not found")])
    assert Ladder._probe_tool(live, "git", ["git", "--version"]) == "missing"
    assert live.calls == 1


def test_a_probe_that_keeps_failing_says_so_instead_of_claiming_a_change():
    live = Live([CairnError("exec timed out")] * ladder.PROBE_ATTEMPTS)
    with pytest.raises(CairnError, match=r"cannot check the sandbox's git \(git --version\)"):
        Ladder._probe_tool(live, "git", ["git", "--version"])
    assert live.calls == ladder.PROBE_ATTEMPTS
