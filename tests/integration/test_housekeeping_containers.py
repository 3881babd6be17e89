"""Housekeeping with real Docker sandboxes: an archived task's stopped sandbox container is in
the plan and a cleanup removes it (a running one, or a live task's, is left alone); the task
still unarchives and runs again in a new sandbox, and each task's share of the data folder is
shown."""

from __future__ import annotations

import pytest

from tests.support import as_json, cairnctl

pytestmark = pytest.mark.docker


def containers(docker_client, data) -> dict[str, str]:
    label = f"cairn.data_dir={data.resolve()}"
    return {
        c.id: c.status for c in docker_client.containers.list(all=True, filters={"label": label})
    }


def test_an_archived_tasks_stopped_sandbox_is_removed_by_a_cleanup(task, tmp_path, docker_client):
    data, archived, _ws = task
    ran = as_json(cairnctl(data, "run", archived, "--json", "--", "sh", "-c", "echo 1 > n.txt"))
    assert ran["state"] == "succeeded"
    other_src = tmp_path / "other"
    other_src.mkdir()
    (other_src / "README").write_text("other\n")
    live = as_json(cairnctl(data, "new", str(other_src), "--json"))["task_id"]
    as_json(cairnctl(data, "run", live, "--json", "--", "true"))
    assert len(containers(docker_client, data)) == 2
    cairnctl(data, "stop", archived)
    cairnctl(data, "stop", live)
    cairnctl(data, "archive", archived)
    statuses = containers(docker_client, data)
    assert sorted(statuses.values()) == ["exited", "exited"]

    shown = as_json(cairnctl(data, "housekeeping", "--json"))
    items = [i for i in shown["plan"]["items"] if i["kind"] == "sandbox_container"]
    assert len(items) == 1 and items[0]["path"] in statuses
    removed = items[0]["path"]
    assert "exited sandbox container" in items[0]["description"]
    shares = shown["plan"]["usage"]["shares"]
    assert {tuple(s["task_ids"]) for s in shares} == {(archived,), (live,)}
    assert all(s["bytes"] == sum(s["parts"].values()) > 0 for s in shares)
    text = cairnctl(data, "housekeeping").stdout
    assert "by task" in text and "(Docker)" in text

    done = as_json(cairnctl(data, "housekeeping", "--yes", "--json"))
    assert done["result"]["skipped"] == []
    left = containers(docker_client, data)
    assert removed not in left and len(left) == 1  # the live task's stopped sandbox stays
    assert not [
        i
        for i in as_json(cairnctl(data, "housekeeping", "--json"))["plan"]["items"]
        if i["kind"] == "sandbox_container"
    ]

    # The archived task comes back and runs in a new sandbox.
    cairnctl(data, "unarchive", archived)
    again = as_json(cairnctl(data, "run", archived, "--json", "--", "sh", "-c", "cat n.txt"))
    assert again["state"] == "succeeded"
    assert len(containers(docker_client, data)) == 2
