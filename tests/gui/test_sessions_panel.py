"""The Sessions & Snapshots tab over a fake facade: running, stopped, gone and unsafe sandboxes,
snapshots, CPU/memory from the facade's figures, Stop / Resume / Reconcile as jobs with their
results and errors shown, and the last resume told in words. Over a real facade on a temporary
data folder (no Docker needed): Snapshot Now, when it is offered, the snapshot it makes, and a
workspace deleted behind the panel's back."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.errors import Conflict
from core.events import RUN_RESUMED, EventBus
from gui.context import AppContext
from gui.qt import QCoreApplication, QEvent, QSettings
from gui.sessions import SessionsPanel
from gui.sessions import data as sessions_data
from gui.sessions.panel import (
    P_ID,
    P_NAME,
    P_RESTORABLE,
    P_REVISION,
    P_SIZE,
    RENAME_TEXT,
    S_BACKEND,
    S_CPU,
    S_MEMORY,
    S_STATE,
    S_TASK,
    S_UPTIME,
    SNAPSHOT_BUSY_TEXT,
    SNAPSHOT_TEXT,
    UNSAFE_TEXT,
)

RECREATED = {
    "run_id": "run-2",
    "path": [
        "checkpoint: ck-1",
        "workspace: restored",
        "sandbox: recreated",
        "engine: new session on the same files (fallback)",
    ],
    "notes": ["sandbox: the container was gone"],
}
REATTACHED = {
    "run_id": "run-9",
    "path": [
        "checkpoint: ck-7",
        "workspace: unchanged since the checkpoint",
        "sandbox: reattached",
        "engine: native resume of session abc",
    ],
    "notes": [],
}


@dataclass
class FakeTask:
    id: str
    title: str
    workspace_id: str
    created_at: float = 0.0


@dataclass
class FakeRun:
    id: str
    state: str = "running"
    resume_report: dict | None = None


@dataclass
class FakeReport:
    d: dict

    def to_dict(self) -> dict:
        return self.d


@dataclass
class FakeCairn:
    """The facade services the panel uses, with canned answers and a record of what was asked."""

    stats: dict | None = None
    fail_resume: bool = False
    calls: list = field(default_factory=list)
    events: EventBus = field(default_factory=EventBus)

    def __post_init__(self):
        self.tasks = SimpleNamespace(all=self.all_tasks)
        self.views = SimpleNamespace(status=self.status, session_stats=self.session_stats)
        self.runs = SimpleNamespace(
            latest=self.latest_run, stop=self.stop, resume=self.resume, reconcile=self.reconcile
        )

    def all_tasks(self):
        return [
            FakeTask("task-a", "fix login", "ws-a"),
            FakeTask("task-b", "docs", "ws-b"),
            FakeTask("task-c", "spike", "ws-c"),
        ]

    def status(self):
        return {
            "sessions": [
                {
                    "session_id": "sess-a",
                    "workspace_id": "ws-a",
                    "backend": "docker",
                    "unsafe": False,
                    "container": "cairn-a",
                    "state": "running",
                    "image": "sha256:0123456789abcdef0123",
                    "generation": 1,
                    "snapshot_id": "snap-a",
                    "age_s": 3725.0,
                    "policy_version": 1,
                },
                {
                    "session_id": "sess-b",
                    "workspace_id": "ws-b",
                    "backend": "docker",
                    "unsafe": False,
                    "container": "cairn-b",
                    "state": "gone",
                    "image": "img-b",
                    "generation": 2,
                    "snapshot_id": "snap-b",
                    "age_s": 90000.0,
                    "policy_version": 1,
                },
                {
                    "session_id": "sess-c",
                    "workspace_id": "ws-c",
                    "backend": "host",
                    "unsafe": True,
                    "container": "host-c",
                    "state": "running",
                    "image": None,
                    "generation": 1,
                    "snapshot_id": None,
                    "age_s": 42.0,
                    "policy_version": 1,
                },
            ],
            "snapshots": [
                {
                    "snapshot_id": "snap-a",
                    "workspace_id": "ws-a",
                    "revision": "a" * 40,
                    "tree": "t",
                    "state": "durable",
                    "created_at": 0,
                    "age_s": 600.0,
                    "size": 2_500_000,
                    "restorable": True,
                },
                {
                    "snapshot_id": "snap-b",
                    "workspace_id": "ws-b",
                    "revision": "b" * 40,
                    "tree": "t",
                    "state": "durable",
                    "created_at": 0,
                    "age_s": 7200.0,
                    "size": None,
                    "restorable": False,
                },
            ],
            "problem": None,
        }

    def session_stats(self, session_id):
        return {"running": True, "note": "no figures from this backend"}

    def latest_run(self, task_id):
        if task_id == "task-b":
            return FakeRun("run-2", resume_report=RECREATED)
        if task_id == "task-a":
            return FakeRun("run-task-a", state="interrupted")
        return FakeRun(f"run-{task_id}")

    def stop(self, task_id):
        self.calls.append(("stop", task_id))
        return {"task_id": task_id, "run": "run-1", "sandbox": "cairn-a"}

    def resume(self, task_id):
        self.calls.append(("resume", task_id))
        if self.fail_resume:
            raise Conflict("run run-9 is running; only an interrupted run can be resumed")
        return FakeRun("run-9"), FakeReport(REATTACHED)

    def reconcile(self):
        self.calls.append(("reconcile",))
        return SimpleNamespace(
            to_dict=lambda: {
                "still_running": ["run-1"],
                "interrupted": ["run-3"],
                "finished": [],
                "sessions_gone": ["sess-b"],
                "orphan_containers": ["stray"],
                "problems": [],
            }
        )


class FakeCairnWithStats(FakeCairn):
    def session_stats(self, session_id):
        return {
            "cpu_percent": 12.5,
            "memory_bytes": 256_000_000,
            "memory_limit_bytes": 4_000_000_000,
            "pids": 3,
            "uptime_s": 61.0,
        }


class FakeCairnWithSlowStats(FakeCairnWithStats):
    """Figures that take the engine's second or so each: every call waits for the others."""

    def __init__(self, fail: str | None = None):
        super().__init__()
        self.fail = fail
        self.together = threading.Barrier(2, timeout=5)

    def session_stats(self, session_id):
        self.together.wait()  # breaks (and the figures fail) when the calls come one by one
        if session_id == self.fail:
            raise RuntimeError("the engine did not answer")
        return super().session_stats(session_id)


@pytest.fixture
def make_panel(qtbot, tmp_path):
    made = []

    def make(cairn):
        context = AppContext(
            cairn, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        )
        panel = SessionsPanel(context)
        qtbot.addWidget(panel)
        panel.resize(1000, 700)
        panel.show()
        qtbot.waitUntil(lambda: panel.sessions.rowCount() == 3, timeout=5000)
        made.append((panel, context))
        return panel

    yield make
    for panel, context in made:
        panel.close()
        panel.deleteLater()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        context.close(close_facade=False)


def _cell(panel, row, col) -> str:
    return panel.sessions.item(row, col).text()


def test_sessions_show_running_gone_and_unsafe_rows(qtbot, make_panel):
    panel = make_panel(FakeCairn())
    assert [_cell(panel, r, S_TASK) for r in range(3)] == ["fix login", "docs", "spike"]
    assert [_cell(panel, r, S_STATE) for r in range(3)] == ["running", "gone", "running"]
    assert _cell(panel, 0, S_BACKEND) == "docker"
    assert _cell(panel, 2, S_BACKEND) == UNSAFE_TEXT
    assert "no isolation" in panel.sessions.item(2, S_BACKEND).toolTip()
    assert _cell(panel, 0, S_UPTIME) == "1 h 2 min"
    assert _cell(panel, 1, S_UPTIME) == "—"  # a gone sandbox has no uptime


def test_cpu_and_memory_come_from_the_facade_when_it_has_stats(qtbot, make_panel):
    panel = make_panel(FakeCairnWithStats())
    assert _cell(panel, 0, S_CPU) == "12.5 %"
    assert _cell(panel, 0, S_MEMORY) == "244.1 MiB of 3.7 GiB"
    assert _cell(panel, 0, S_UPTIME) == "1 min"


def test_the_figures_of_running_sandboxes_are_asked_for_at_once():
    """Docker samples each sandbox's CPU twice, a second apart: asked in turn, a refresh of many
    sandboxes would outlast the refresh period and the figures would lag ever further."""
    loaded = sessions_data.load_sessions(FakeCairnWithSlowStats())
    running = [row for row in loaded.sessions if row.state == "running"]
    assert len(running) == 2
    assert [row.cpu_percent for row in running] == [12.5, 12.5]
    assert all(row.stats_note == "from the sandbox backend" for row in running)


def test_one_sandbox_without_figures_leaves_the_others_theirs():
    loaded = sessions_data.load_sessions(FakeCairnWithSlowStats(fail="sess-a"))
    by_id = {row.session_id: row for row in loaded.sessions}
    assert by_id["sess-a"].cpu_percent is None
    assert by_id["sess-a"].stats_note == "figures unavailable: the engine did not answer"
    assert by_id["sess-c"].cpu_percent == 12.5
    assert by_id["sess-b"].stats_note == sessions_data.NOT_RUNNING_REASON


def test_snapshots_list_revision_age_size_and_restorable(qtbot, make_panel):
    panel = make_panel(FakeCairn())
    table = panel.snapshots
    assert table.rowCount() == 2
    row0 = [table.item(0, c).text() for c in range(table.columnCount())]
    assert row0 == ["snap-a", "", "fix login", "a" * 12, "10 min", "2.4 MiB", "yes"]
    assert table.item(1, P_RESTORABLE).text() == "NO" and table.item(1, P_SIZE).text() == "—"


def test_the_last_resume_is_told_in_words(qtbot, make_panel):
    panel = make_panel(FakeCairn())
    panel.set_task("task-b")
    text = panel.resume_report.text()
    assert "run run-2" in text
    assert "recreated the sandbox" in text
    assert "restored the workspace from its snapshot" in text
    assert "fell back to a new engine session" in text
    assert "the container was gone" in text
    panel.set_task("task-a")
    assert panel.resume_report.text() == "No resume yet."


def test_resume_runs_as_a_job_and_reports_reattached(qtbot, make_panel):
    cairn = FakeCairn()
    panel = make_panel(cairn)
    panel.set_task("task-a")
    assert panel.resume_button.isEnabled()
    with qtbot.waitSignal(panel.sig_action_done, timeout=5000) as done:
        panel.resume_button.click()
    assert done.args == ["resume", True]
    assert cairn.calls == [("resume", "task-a")]
    assert "reattached to the sandbox" in panel.resume_report.text()
    assert "run-9" in panel.message.text()


def test_a_failed_resume_shows_the_error(qtbot, make_panel):
    panel = make_panel(FakeCairn(fail_resume=True))
    panel.set_task("task-a")
    with qtbot.waitSignal(panel.sig_action_done, timeout=5000) as done:
        panel.resume_selected()
    assert done.args == ["resume", False]
    assert panel.message.text().startswith("Resume failed: run run-9 is running")
    assert panel.resume_button.isEnabled()


def test_stop_and_reconcile_show_their_results(qtbot, make_panel):
    cairn = FakeCairn()
    panel = make_panel(cairn)
    panel.set_task("task-a")
    with qtbot.waitSignal(panel.sig_action_done, timeout=5000):
        panel.stop_button.click()
    assert panel.message.text() == "Stop: cancelled run run-1, stopped sandbox cairn-a."
    with qtbot.waitSignal(panel.sig_action_done, timeout=5000):
        panel.reconcile_button.click()
    message = panel.message.text()
    assert "1 run(s) marked interrupted" in message and "1 sandbox(es) gone" in message
    assert "(left alone)" in message
    assert cairn.calls == [("stop", "task-a"), ("reconcile",)]


def test_stop_is_offered_only_for_a_running_sandbox(qtbot, make_panel):
    panel = make_panel(FakeCairn())
    panel.set_task("task-b")  # gone
    assert not panel.stop_button.isEnabled()
    assert panel.resume_button.isEnabled()
    panel.set_task("task-a")
    assert panel.stop_button.isEnabled()


def test_a_resume_event_updates_the_report(qtbot, make_panel):
    cairn = FakeCairn()
    panel = make_panel(cairn)
    panel.set_task("task-c")
    cairn.events.publish(RUN_RESUMED, "run-9", task_id="task-c", report=REATTACHED)
    qtbot.waitUntil(lambda: "reattached" in panel.resume_report.text(), timeout=5000)


def test_describe_resume_covers_each_outcome():
    text = sessions_data.describe_resume(
        {
            "run_id": "r",
            "path": [
                "workspace: restored into new workspace ws-9",
                "sandbox: created",
                "checkpoint: none",
            ],
        }
    )
    assert "restored the checkpoint into a new workspace (ws-9)" in text
    assert "created a new sandbox" in text
    assert "started over from the first step" in text


# -- Snapshot Now over a real facade -------------------------------------------------------------


@pytest.fixture
def real_panel(qtbot, context):
    panel = SessionsPanel(context)
    qtbot.addWidget(panel)
    panel.resize(1000, 700)
    panel.show()
    with qtbot.waitSignal(panel.sig_loaded, timeout=10_000):
        pass
    yield panel
    panel.close()
    panel.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


def _select(qtbot, panel, task_id) -> None:
    with qtbot.waitSignal(panel.sig_target_checked, timeout=10_000):
        panel.set_task(task_id)


def _snapshot_rows(panel) -> list[tuple[str, str]]:
    table = panel.snapshots
    return [
        (table.item(r, P_ID).text(), table.item(r, P_REVISION).toolTip())
        for r in range(table.rowCount())
    ]


def test_snapshot_now_needs_a_task_with_its_workspace_on_disk(
    qtbot, cairn, real_panel, repo, tmp_path
):
    panel = real_panel
    assert not panel.snapshot_button.isEnabled()
    assert panel.snapshot_button.toolTip() == "Select a task to snapshot its workspace"

    present = cairn.tasks.new(repo, title="present").task
    _select(qtbot, panel, present.id)
    assert panel.snapshot_button.isEnabled()
    assert "present" in panel.snapshot_button.toolTip()

    archived = cairn.tasks.new(repo, title="archived").task
    cairn.housekeeping.archive(archived.id)
    _select(qtbot, panel, archived.id)
    assert not panel.snapshot_button.isEnabled()
    assert "is archived" in panel.snapshot_button.toolTip()

    gone = cairn.tasks.new(repo, title="gone").task
    shutil.rmtree(cairn.tasks.workspace_of(gone).root)
    _select(qtbot, panel, gone.id)
    assert not panel.snapshot_button.isEnabled()
    assert "folder of gone is missing" in panel.snapshot_button.toolTip()

    _select(qtbot, panel, present.id)
    assert panel.snapshot_button.isEnabled()
    panel.set_task(None)
    assert not panel.snapshot_button.isEnabled()


def test_snapshot_now_makes_a_snapshot_that_appears_in_the_table(qtbot, cairn, real_panel, repo):
    panel = real_panel
    task = cairn.tasks.new(repo, title="login").task
    (Path(cairn.tasks.workspace_of(task).root) / "new.txt").write_text("unrecorded edit\n")
    _select(qtbot, panel, task.id)
    assert cairn.snapshots.all(task.id) == []

    with qtbot.waitSignal(panel.sig_action_done, timeout=30_000) as done:
        panel.snapshot_button.click()
        assert panel.snapshot_button.text() == SNAPSHOT_BUSY_TEXT
        assert not panel.snapshot_button.isEnabled()
        assert panel.message.text() == "Snapshotting the workspace of login…"
    assert done.args == ["snapshot", True]

    [snap] = cairn.snapshots.all(task.id)
    latest = cairn.revisions.all(task.id)[-1]
    assert snap.revision_id == latest.id and latest.trigger == "checkpoint"  # the edit is in it
    assert panel.message.text() == (
        f"Snapshot {snap.id} made of revision {latest.id[:12]} (login)."
    )
    qtbot.waitUntil(lambda: (snap.id, latest.id) in _snapshot_rows(panel), timeout=10_000)
    assert panel.snapshot_button.text() == SNAPSHOT_TEXT
    qtbot.waitUntil(panel.snapshot_button.isEnabled, timeout=10_000)

    with qtbot.waitSignal(panel.sig_action_done, timeout=30_000):
        panel.snapshot_button.click()  # nothing changed since: the same snapshot is kept
    assert len(cairn.snapshots.all(task.id)) == 1
    assert f"already had snapshot {snap.id}" in panel.message.text()


def test_a_snapshot_is_named_and_renamed_from_the_table(qtbot, cairn, real_panel, repo):
    panel = real_panel
    task = cairn.tasks.new(repo, title="login").task
    snap = cairn.snapshots.take(task.id)
    panel.refresh()
    qtbot.waitUntil(lambda: panel.snapshots.rowCount() == 1, timeout=10_000)
    assert panel.rename_button.text() == RENAME_TEXT
    assert not panel.rename_button.isEnabled()  # nothing selected
    assert panel.rename_button.toolTip() == "Select a snapshot to name it"
    panel.snapshots.selectRow(0)
    assert panel.rename_button.isEnabled()

    answers = iter(["  before the refactor ", None, "known good", ""])
    panel._ask_name = lambda _snap: next(answers)
    with qtbot.waitSignal(panel.sig_action_done, timeout=10_000) as done:
        panel.rename_button.click()
    assert done.args == ["rename", True]
    assert cairn.snapshots.get(snap.id).name == "before the refactor"
    assert panel.message.text() == f"Snapshot {snap.id} is named “before the refactor”."
    name_cell = lambda: panel.snapshots.item(0, P_NAME).text()  # noqa: E731
    qtbot.waitUntil(lambda: name_cell() == "before the refactor", timeout=10_000)
    assert panel.selected_snapshot() is not None  # still selected after the reload

    panel.rename_selected()  # cancelled: nothing asked of the facade
    assert cairn.snapshots.get(snap.id).name == "before the refactor"

    # Renamed elsewhere (cairnctl): the table follows the event.
    cairn.snapshots.rename(snap.id, "from the command line")
    qtbot.waitUntil(lambda: name_cell() == "from the command line", timeout=10_000)

    panel.snapshots.selectRow(0)
    with qtbot.waitSignal(panel.sig_action_done, timeout=10_000):
        panel.rename_selected()
    qtbot.waitUntil(lambda: name_cell() == "known good", timeout=10_000)
    with qtbot.waitSignal(panel.sig_action_done, timeout=10_000):
        panel.rename_selected()
    assert cairn.snapshots.get(snap.id).name is None
    assert panel.message.text() == f"Snapshot {snap.id} has no name."


def test_a_workspace_deleted_behind_the_panel_says_why_the_snapshot_failed(
    qtbot, cairn, real_panel, repo
):
    panel = real_panel
    task = cairn.tasks.new(repo, title="doomed").task
    _select(qtbot, panel, task.id)
    assert panel.snapshot_button.isEnabled()
    root = cairn.tasks.workspace_of(task).root
    shutil.rmtree(root)  # after the check: the panel still offers the button

    with qtbot.waitSignal(panel.sig_action_done, timeout=30_000) as done:
        panel.snapshot_button.click()
    assert done.args == ["snapshot", False]
    message = panel.message.text()
    assert message.startswith("Snapshot failed: the workspace folder")
    assert root in message and "missing" in message
    assert panel.message.property("error") is True
    assert cairn.snapshots.all(task.id) == []
    qtbot.waitUntil(lambda: not panel.snapshot_button.isEnabled(), timeout=10_000)
    assert "missing" in panel.snapshot_button.toolTip()


def test_resume_is_disabled_with_the_reason_for_a_finished_run(qtbot, make_panel):
    cairn = FakeCairn()
    cairn.latest_run = lambda task_id: FakeRun(f"run-{task_id}", state="succeeded")  # type: ignore[method-assign]
    cairn.runs.latest = cairn.latest_run
    panel = make_panel(cairn)
    panel.set_task("task-a")
    qtbot.waitUntil(lambda: panel.selected_session() is not None, timeout=5000)
    assert not panel.resume_button.isEnabled()
    assert "only an interrupted run can be resumed" in panel.resume_button.toolTip()


def test_a_red_error_line_is_cleared_when_a_run_moves_or_the_task_changes(qtbot, make_panel):
    cairn = FakeCairn(fail_resume=True)
    panel = make_panel(cairn)
    panel.set_task("task-a")
    with qtbot.waitSignal(panel.sig_action_done, timeout=5000):
        panel.resume_selected()
    assert panel.message.text().startswith("Resume failed")
    cairn.events.publish("run.state", "run-9", state="running", task_id="task-a")
    qtbot.waitUntil(lambda: panel.message.text() == "", timeout=5000)
    assert not panel.message.property("error")
