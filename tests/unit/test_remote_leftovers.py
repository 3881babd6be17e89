"""What a deleted task left on a remote sandbox host: which sessions count as left behind, and
the records of the deletions whose host did not answer (no remote host needed here)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core import housekeeping
from core.app import Cairn
from core.housekeeping import REMOTE_GRACE_SECONDS, _left_behind, remote_leftovers
from core.models import SessionRecord
from core.sandbox.remote import SessionParts, _epoch


@pytest.fixture
def cairn(tmp_path: Path):
    app = Cairn(tmp_path / "data")
    yield app
    app.close()


def test_a_session_the_store_knows_is_never_left_behind():
    parts = SessionParts("ses_a", made_at=0.0)
    recorded = {"ses_a": {"host": "far"}}
    assert not _left_behind("ses_a", parts, {"ses_a"}, recorded, now=1e10)


def test_an_unknown_session_is_left_behind_when_recorded_or_old_enough():
    now = 1_000_000.0
    young = SessionParts("ses_b", made_at=now - 60)
    old = SessionParts("ses_b", made_at=now - REMOTE_GRACE_SECONDS - 1)
    assert not _left_behind("ses_b", young, set(), {}, now)  # being made, perhaps
    assert _left_behind("ses_b", old, set(), {}, now)
    assert _left_behind("ses_b", young, set(), {"ses_b": {"host": "far"}}, now)


def test_docker_times_are_read_and_a_bad_one_is_zero():
    assert _epoch("1970-01-01T00:01:40Z") == 100.0
    assert _epoch("2026-12-02T01:26:20.123456789Z") == pytest.approx(1796174780.123456)
    assert _epoch("yesterday") == 0.0
    assert _epoch(None) == 0.0


def test_records_that_cannot_be_read_or_do_not_match_their_name_are_skipped(cairn):
    root = cairn.ctx.data.root / housekeeping.REMOTE_LEFTOVERS
    root.mkdir(parents=True)
    (root / "ses_ok.json").write_text(json.dumps({"session_id": "ses_ok", "host": "far"}))
    (root / "ses_bad.json").write_text("{not json")
    (root / "ses_other.json").write_text(json.dumps({"session_id": "ses_x", "host": "far"}))
    (root / "ses_nohost.json").write_text(json.dumps({"session_id": "ses_nohost"}))
    assert list(remote_leftovers(cairn.ctx)) == ["ses_ok"]


def test_a_plan_without_remote_hosts_asks_none_and_lists_no_remote_item(cairn):
    plan = cairn.housekeeping.plan()
    assert not [i for i in plan.items if i.kind == housekeeping.KIND_REMOTE]


def test_a_task_on_a_host_taken_out_of_the_settings_is_deleted_and_its_leftovers_recorded(
    cairn, tmp_path
):
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("hi\n")
    task = cairn.tasks.new(src, title="far away").task
    assert task.workspace_id
    now = time.time()
    cairn.ctx.store.put_session(
        SessionRecord("ses_gonehost", task.workspace_id, "docker-ssh", "c1", "cairn-ses_gonehost",
                      None, status="stopped", created_at=now, updated_at=now, host="nowhere")
    )  # fmt: skip
    done = cairn.housekeeping.delete(task.id)
    assert any("no longer in the settings" in n and "hosts.nowhere" in n for n in done.notes), done
    assert not Path(done.workspace_root or "").exists()
    assert remote_leftovers(cairn.ctx)["ses_gonehost"]["host"] == "nowhere"
    # A cleanup cannot ask it either: nothing listed, nothing lost.
    plan = cairn.housekeeping.plan()
    assert not [i for i in plan.items if i.kind == housekeeping.KIND_REMOTE]
    assert "ses_gonehost" in remote_leftovers(cairn.ctx)
