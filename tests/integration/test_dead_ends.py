"""No dead ends on the command line: a task whose sandbox vanished can be archived; a task is
renamed, edited before its first run and deleted (with its sandbox and workspace) after saying
what goes; deleting is refused while a run is in flight."""

from __future__ import annotations

from tests.support import as_json, cairnctl, one_error_line, wait_for


def session_of(data) -> dict:
    (session,) = as_json(cairnctl(data, "status", "--json"))["sessions"]
    return session


def test_a_finished_task_whose_sandbox_vanished_can_be_archived(task, docker_client):
    data, task_id, _root = task
    assert as_json(cairnctl(data, "run", task_id, "--json", "--", "true"))["state"] == "succeeded"
    docker_client.containers.get(session_of(data)["container"]).remove(force=True)
    archived = as_json(cairnctl(data, "archive", task_id, "--json"))
    assert archived["state"] == "archived"


def test_rename_edit_and_delete_from_the_command_line(task, docker_client):
    data, task_id, root = task
    assert as_json(cairnctl(data, "rename", task_id, "Login  fix", "--json"))["title"] == (
        "Login fix"
    )
    edited = as_json(cairnctl(data, "edit", task_id, "-m", "echo hi > hi.txt", "--json"))
    assert edited["instructions"] == "echo hi > hi.txt"
    run = as_json(cairnctl(data, "run", task_id, "--detach", "--json", "--step", "sleep 30"))
    wait_for(
        lambda: as_json(cairnctl(data, "tasks", "--json"))["tasks"][0]["run_state"] == "running",
        timeout=60,
        what="the run to be running",
    )
    refused = cairnctl(data, "delete", task_id, "--yes", check=False)
    assert "cannot be deleted" in one_error_line(refused) and "running" in one_error_line(refused)
    late = cairnctl(data, "edit", task_id, "-m", "other", check=False)
    assert "has run already" in one_error_line(late)

    cairnctl(data, "stop", task_id)
    container = session_of(data)["container"]
    asked = cairnctl(data, "delete", task_id, check=False)
    assert asked.returncode != 0
    assert str(root) in asked.stderr and container in asked.stderr  # says exactly what goes
    assert root.is_dir()  # nothing went without --yes
    done = as_json(cairnctl(data, "delete", task_id, "--yes", "--json"))["deleted"]
    assert done["task_id"] == task_id and done["workspace_goes"] and done["runs"] == 1
    assert not root.exists()
    assert as_json(cairnctl(data, "tasks", "--json"))["tasks"] == []
    assert [c for c in docker_client.containers.list(all=True) if c.name == container] == []
    assert run["run_id"]
