"""`cairnctl restore` after real shell runs in the Docker sandbox: one file back byte-exact while
the run's other changes and a hand edit stay, the hand edit recorded first and the restore undone
by restoring its parent; undoing a middle revision (clean merge, and a conflict that writes
nothing); the whole workspace back with ignored files untouched; refused while a run is live."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support import as_json, cairnctl, one_error_line, release_data_dir, wait_for

SCRIPT = b"#!/bin/sh\necho 'the original script'\n"
NOTES = "".join(f"line {i}\n" for i in range(1, 21))


@pytest.fixture
def project(tmp_path, sandbox_image, docker_client):
    """(data folder, task id, workspace root) of a task on a folder with a few kinds of file."""
    data = tmp_path / "data"
    src = tmp_path / "src"
    src.mkdir()
    (src / ".gitignore").write_text("*.log\n")
    (src / "config.ini").write_text("name=old\nlevel=1\n")
    (src / "script.sh").write_bytes(SCRIPT)
    (src / "script.sh").chmod(0o755)
    (src / "gen.py").write_text(
        "import sys\nopen('generated.txt', 'w').write('generated ' + sys.argv[1] + '\\n')\n"
    )
    (src / "generated.txt").write_text("generated 0\n")
    (src / "notes.md").write_text(NOTES)
    made = as_json(cairnctl(data, "new", str(src), "--json"))
    yield data, made["task_id"], Path(made["workspace_root"])
    release_data_dir(data, docker_client)


def revisions(data: Path, task_id: str) -> list[dict]:
    return as_json(cairnctl(data, "revisions", task_id, "--json"))["revisions"]


def run_steps(data: Path, task_id: str, *steps: str) -> str:
    args = [a for s in steps for a in ("--step", s)]
    run = as_json(cairnctl(data, "run", task_id, "--json", *args, timeout=300))
    assert run["state"] == "succeeded", run
    return run["run_id"]


def restore(data: Path, task_id: str, *args: str, check: bool = True) -> dict:
    proc = cairnctl(data, "restore", task_id, *args, "--json", check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return as_json(proc)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_one_file_back_byte_exact_and_the_restore_undone_by_its_parent(project):
    data, task_id, root = project
    base = revisions(data, task_id)[0]
    assert mode(root / "script.sh") == 0o755
    run_steps(
        data,
        task_id,
        "sed -i 's/name=old/name=new/' config.ini",
        "rm script.sh",
        "python3 gen.py 1",
    )
    assert not (root / "script.sh").exists()
    assert (root / "config.ini").read_text() == "name=new\nlevel=1\n"
    assert (root / "generated.txt").read_text() == "generated 1\n"
    with open(root / "notes.md", "a") as f:
        f.write("a hand edit outside the sandbox\n")
    hand_edited = (root / "notes.md").read_bytes()
    count = len(revisions(data, task_id))

    done = restore(data, task_id, base["id"], "script.sh")

    assert (root / "script.sh").read_bytes() == SCRIPT
    assert mode(root / "script.sh") == 0o755
    assert (root / "config.ini").read_text() == "name=new\nlevel=1\n"
    assert (root / "generated.txt").read_text() == "generated 1\n"
    assert (root / "notes.md").read_bytes() == hand_edited
    assert done["paths"] == [{"path": "script.sh", "action": "written", "reason": None}]

    # The hand edit is a revision of its own, before the restore's.
    revs = revisions(data, task_id)
    assert len(revs) == count + 2
    before, restored = revs[-2], revs[-1]
    assert before["trigger"] == "external" and before["id"] == done["before"]["id"]
    assert restored["trigger"] == "restore" and restored["parent"] == before["id"]
    hand = cairnctl(data, "diff", task_id, revs[-3]["id"], before["id"]).stdout
    assert "+a hand edit outside the sandbox" in hand

    # Restoring the restore's parent undoes it.
    again = restore(data, task_id, before["id"], "script.sh")
    assert not (root / "script.sh").exists()
    assert again["revision"]["tree"] == before["tree"]
    assert (root / "notes.md").read_bytes() == hand_edited


def _revision_changing(data: Path, task_id: str, run_id: str, text: str) -> str:
    """The one revision of the run whose diff adds `text`."""
    found = []
    for rev in revisions(data, task_id):
        if rev["run_id"] != run_id or not rev["parent"]:
            continue
        diff = cairnctl(data, "diff", task_id, rev["parent"], rev["id"]).stdout
        if text in diff:
            found.append(rev["id"])
    assert len(found) == 1, found
    return found[0]


def test_undo_of_a_middle_revision_merges_or_reports_an_overlap(project):
    data, task_id, root = project
    middle_run = run_steps(data, task_id, "sed -i '3s/.*/line 3 by the middle run/' notes.md")
    middle = _revision_changing(data, task_id, middle_run, "+line 3 by the middle run")
    run_steps(data, task_id, "sed -i '18s/.*/line 18 changed later/' notes.md")

    clean = restore(data, task_id, "--undo", middle)

    want = NOTES.replace("line 18\n", "line 18 changed later\n")
    assert (root / "notes.md").read_text() == want
    assert clean["conflicts"] == [] and clean["revision"]["trigger"] == "restore"

    # Redo the middle change, then edit the same line later: undoing it now overlaps.
    redo = restore(data, task_id, "--undo", clean["revision"]["id"])
    assert (root / "notes.md").read_text() == want.replace("line 3\n", "line 3 by the middle run\n")
    assert redo["conflicts"] == []
    run_steps(data, task_id, "sed -i '3s/.*/line 3 edited again/' notes.md")
    edited = (root / "notes.md").read_bytes()
    inode = (root / "notes.md").stat().st_ino

    proc = cairnctl(data, "restore", task_id, "--undo", middle, check=False)

    assert proc.returncode == 1, proc.stderr
    assert "conflict" in proc.stdout and "notes.md" in proc.stdout
    assert (root / "notes.md").read_bytes() == edited
    assert (root / "notes.md").stat().st_ino == inode


def test_the_whole_workspace_back_ignored_files_untouched_refused_while_live(project):
    data, task_id, root = project
    base = revisions(data, task_id)[0]
    run_steps(
        data,
        task_id,
        "sed -i 's/level=1/level=2/' config.ini",
        "rm script.sh",
        "mkdir -p out && python3 gen.py 2 && mv generated.txt out/",
        "echo noise > build.log",
    )
    (root / "debug.log").write_text("a hand-made ignored file\n")

    # Refused while a run is live, with the reason; nothing written.
    cairnctl(data, "run", task_id, "--detach", "--json", "--step", "sleep 60")
    wait_for(
        lambda: as_json(cairnctl(data, "tasks", "--json"))["tasks"][0]["run_state"] == "running",
        timeout=60,
        what="the run to be running",
    )
    refused = cairnctl(data, "restore", task_id, base["id"], check=False)
    line = one_error_line(refused)
    assert "live" in line and "stop it" in line
    assert not (root / "script.sh").exists()
    cairnctl(data, "stop", task_id)
    wait_for(
        lambda: (
            as_json(cairnctl(data, "tasks", "--json"))["tasks"][0]["run_state"]
            not in ("running", "preparing", "queued")
        ),
        timeout=60,
        what="the run to end",
    )

    done = restore(data, task_id, base["id"])

    assert done["kind"] == "workspace"
    assert done["revision"]["tree"] == base["tree"]
    assert (root / "script.sh").read_bytes() == SCRIPT
    assert (root / "config.ini").read_text() == "name=old\nlevel=1\n"
    assert (root / "generated.txt").read_text() == "generated 0\n"
    assert not (root / "out").exists()
    assert (root / "build.log").read_text() == "noise\n"
    assert (root / "debug.log").read_text() == "a hand-made ignored file\n"
    assert (root / ".git").is_dir()
    # Nothing left unrecorded: a verifying capture finds the restored tree.
    captured = as_json(cairnctl(data, "capture", task_id, "--json"))
    assert not captured["changed"] and captured["revision"] == done["revision"]["id"]
    assert os.access(root / "script.sh", os.X_OK)
