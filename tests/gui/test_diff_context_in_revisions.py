"""More context around a hunk in the Revisions tab reads the whole file through the facade
(`cairn.revisions.diff` with whole-file context, limited to that file's paths)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.gui.test_revisions_panel import _wait_timeline, cairn, context, panel  # noqa: F401

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def test_more_context_comes_from_the_task_s_vault(qtbot, panel, cairn, tmp_path):  # noqa: F811
    src = tmp_path / "project"
    src.mkdir()
    (src / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    (src / "other.txt").write_text("other\n")
    made = cairn.tasks.new(src, title="long")
    ws = Path(made.workspace.root)
    (ws / "long.txt").write_text(
        "".join(f"line {i}{' edited' if i == 60 else ''}\n" for i in range(1, 101))
    )
    (ws / "other.txt").write_text("other edited\n")
    rev, _ = cairn.revisions.capture(made.task.id)
    panel.set_task(made.task.id)
    _wait_timeline(qtbot, panel, 2)
    with qtbot.waitSignal(panel.sig_diff_shown, timeout=10_000):
        panel.select_revisions(made.base_revision, rev.id)
    viewer = panel.viewer
    viewer.select_file(next(i for i, f in enumerate(viewer.diff.files) if f.path == "long.txt"))
    assert viewer.shown_file.hunks[0].new_start == 57
    assert viewer.expand_up_button.isEnabled()
    viewer.expand(0, "above")
    qtbot.waitUntil(lambda: viewer.shown_file.hunks[0].new_start == 37, timeout=10_000)
    viewer.expand(0, "all")
    assert viewer.shown_file.hunks[0].new_lines == 100
    assert viewer.shown_text().splitlines()[1] == " line 1"
