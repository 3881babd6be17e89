"""A real shell run in the Docker sandbox, recorded as it runs, reads as a history: every revision
it made names the step that made it and its files, and a loop rewriting one file every second is
one burst."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.app import Cairn
from core.history import bursts
from tests.support import as_json, cairnctl, release_data_dir

LOOP = "for i in 1 2 3 4 5 6 7 8; do echo $i >> loop.txt; sleep 1; done"


@pytest.fixture
def project(tmp_path, sandbox_image, docker_client):
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.ini").write_text("name=old\n")
    (src / "old.txt").write_text("old\n")
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    yield data, made["task_id"], Path(made["workspace_root"])
    release_data_dir(data, docker_client)


def test_each_revision_of_a_shell_run_names_its_step_and_a_loop_is_one_burst(project):
    data, task_id, root = project
    steps = ["sed -i 's/old/new/' config.ini", LOOP, "sleep 1; rm old.txt"]
    args = [a for s in steps for a in ("--step", s)]
    run = as_json(cairnctl(data, "run", task_id, "--json", *args, timeout=300))
    assert run["state"] == "succeeded", run

    cairn = Cairn(data)
    try:
        described = cairn.views.history(task_id)
    finally:
        cairn.close()
    of_run = [d for d in described if d.revision.run_id == run["run_id"]]
    assert of_run, [d.description for d in described]
    for d in of_run:
        if "config.ini" in d.paths and len(d.paths) == 1:
            assert d.what.startswith("step 1/3: sed -i"), d.description
        if d.paths == ("loop.txt",):
            assert d.what == f"step 2/3: {LOOP}", d.description
        if d.paths == ("old.txt",):
            assert d.what == "step 3/3: sleep 1; rm old.txt", d.description
    loops = [b for b in bursts(described) if b.first.paths == ("loop.txt",)]
    assert len(loops) == 1 and len(loops[0].members) >= 3, [d.description for d in described]
    out = cairnctl(data, "revisions", task_id).stdout
    assert f"step 2/3: {LOOP} · loop.txt" in out
