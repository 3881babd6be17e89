"""Following a run shows everything it printed as it is stored: a line cut short when the run's
process is killed reaches the follower's output before the run is settled as interrupted, not
only the store (host backend: no Docker needed)."""

from __future__ import annotations

import pytest

from core.app import Cairn
from core.runs import output_of
from tests.support import kill_run_process, wait_for

COMMANDS = ["echo before", "printf 'echo after > afte'; sleep 30"]


@pytest.fixture
def cairn(monkeypatch, data_dir):
    monkeypatch.setenv("CAIRN_BACKEND", "host")
    facade = Cairn(data_dir)
    yield facade
    facade.close()


def test_a_line_cut_by_a_killed_process_reaches_the_follower(cairn, repo):
    made = cairn.tasks.new(repo, title="Cut", engine="shell", instructions="\n".join(COMMANDS))
    cairn.tasks.set_policy(made.task.id, network="open")
    run = cairn.runs.start(made.task.id, commands=COMMANDS)
    files = cairn.runs.files(run)

    def printed() -> bool:
        return files.stdout.exists() and b"afte" in files.stdout.read_bytes()

    wait_for(printed, timeout=20, what="the run's cut line", interval=0.05)
    assert files.pid is not None
    kill_run_process(files.pid)
    seen: list[str] = []
    ended = cairn.runs.follow(run.id, on_output=lambda stream, text: seen.append(text))
    assert ended.state == "interrupted"
    shown = "".join(seen)
    assert "before" in shown
    assert shown.endswith("echo after > afte"), shown  # the cut line
    assert output_of(cairn.ctx.store, run.id) == shown  # what was shown is what was stored
