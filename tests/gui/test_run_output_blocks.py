"""Run output as blocks: one per tool call (its command or file, its output, its exit status) and
per shell step, with times; each attempt on its own line under its header; blocks fold and copy;
Ctrl+F in the pane finds and moves between matches; the pane's height is remembered."""

from __future__ import annotations

import json

import pytest

from core.output_blocks import AttemptStart, OutputRecord, encode, marker
from gui.qt import QApplication, QPoint, QSettings, Qt
from gui.task_view.actions import START
from gui.task_view.output import (
    ATTEMPT,
    CALL,
    DONE,
    FAILED,
    INTERRUPTED,
    MESSAGE,
    RUNNING,
    STEP,
    TEXT,
    Transcript,
)
from gui.task_view.output_view import HEIGHT_KEY, OutputView
from tests.gui.test_task_view import host_cairn, output_text, shown  # noqa: F401


def jl(obj) -> str:
    return json.dumps(obj) + "\n"


def claude_run() -> str:
    return "".join(
        [
            jl({"type": "system", "subtype": "init", "session_id": "s-1", "model": "m"}),
            jl(
                {
                    "type": "assistant",
                    "message": {
                        "content": [
                            {"type": "text", "text": "Running the tests."},
                            {
                                "type": "tool_use",
                                "id": "t1",
                                "name": "Bash",
                                "input": {"command": "pytest -q"},
                            },
                            {
                                "type": "tool_use",
                                "id": "t2",
                                "name": "Edit",
                                "input": {"file_path": "src/app.py"},
                            },
                        ]
                    },
                }
            ),
            jl(
                {
                    "type": "user",
                    "message": {
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "content": "Exit code 1\n3 passed\n1 failed",
                                "is_error": True,
                            },
                            {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
                        ]
                    },
                }
            ),
            jl({"type": "result", "subtype": "success", "result": "All done."}),
        ]
    )


@pytest.fixture
def settings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "ui.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def view(qtbot, settings) -> OutputView:
    widget = OutputView(settings=settings)
    qtbot.addWidget(widget)
    widget.resize(700, 420)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


# -- the transcript (no Qt) -------------------------------------------------------------------------


def test_a_tool_call_holds_its_output_and_status():
    t = Transcript()
    t.feed("stdout", claude_run(), at=100.0)
    kinds = [(b.kind, b.title) for b in t.blocks]
    assert kinds == [
        ("session", "session s-1 (m)"),
        (MESSAGE, "Running the tests."),
        (CALL, "$ pytest -q"),
        (CALL, "edited src/app.py"),
        ("result", "All done."),
    ]
    bash, edit = t.blocks[2], t.blocks[3]
    assert [line.text for line in bash.lines] == ["Exit code 1", "3 passed", "1 failed"]
    assert (bash.status, bash.exit_code) == (FAILED, 1)
    assert edit.status == DONE and [line.text for line in edit.lines] == ["ok"]


def test_codex_commands_are_shown_as_the_model_asked_for_them():
    started = {
        "type": "item.started",
        "item": {"id": "i1", "type": "command_execution", "command": "/bin/bash -lc 'make test'"},
    }
    t = Transcript()
    t.feed("stdout", jl(started))
    assert t.blocks[-1].title == "$ make test"


def test_codex_exit_codes_are_the_call_s_status():
    t = Transcript()
    started = {
        "type": "item.started",
        "item": {"id": "i1", "type": "command_execution", "command": "make"},
    }
    t.feed("stdout", jl(started), at=1.0)
    assert t.blocks[-1].status == RUNNING
    done = {
        "type": "item.completed",
        "item": {
            "id": "i1",
            "type": "command_execution",
            "command": "make",
            "aggregated_output": "boom\n",
            "exit_code": 2,
        },
    }
    t.feed("stdout", jl(done), at=3.5)
    call = t.blocks[-1]
    assert (call.status, call.exit_code) == (FAILED, 2)
    assert call.text() == "$ make · 00:00:01 · 2.5 s · exit 2\nboom".replace(
        "00:00:01", call.text().split(" · ")[1]
    )


def test_shell_steps_are_blocks_and_the_last_gets_the_run_s_exit_code():
    t = Transcript()
    t.feed("stdout", "cairn: step 1/2: echo hi\nhi\ncairn: step 2/2: false\n", at=5.0)
    t.finish(exit_code=1, at=6.0)
    steps = [b for b in t.blocks if b.kind == STEP]
    assert [b.title for b in steps] == ["step 1/2 · $ echo hi", "step 2/2 · $ false"]
    assert [line.text for line in steps[0].lines] == ["hi"]
    assert (steps[0].status, steps[0].exit_code) == (DONE, 0)
    assert (steps[1].status, steps[1].exit_code) == (FAILED, 1)


def test_plain_output_is_one_block_and_an_attempt_ends_its_cut_line():
    t = Transcript()
    t.feed("stdout", "one\necho after > afte", at=1.0)
    t.feed("stderr", "noise\n", at=1.0)
    t.start_attempt(2, "sandbox recreated", at=9.0)
    t.feed("stdout", "after\n", at=10.0)
    titles = [(b.kind, b.title) for b in t.blocks]
    assert titles[0] == (TEXT, "output")
    assert [line.text for line in t.blocks[0].lines] == ["one", "noise", "echo after > afte"]
    assert titles[1] == (ATTEMPT, "attempt 2 · resumed: sandbox recreated")
    assert [line.text for line in t.blocks[2].lines] == ["after"]


def test_an_open_call_is_interrupted_by_a_new_attempt():
    t = Transcript()
    t.feed(
        "stdout",
        jl(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "x",
                            "name": "Bash",
                            "input": {"command": "sleep 99"},
                        }
                    ]
                },
            }
        ),
    )
    t.start_attempt(2)
    assert t.blocks[0].status == INTERRUPTED


# -- the pane ---------------------------------------------------------------------------------------


def test_blocks_are_drawn_with_headers_and_fold(qtbot, view):
    view.reset(claude_run())
    view.finish()
    text = view.toPlainText()
    assert "▾ $ pytest -q · exit 1" in text
    assert "3 passed\n1 failed" in text
    assert "▾ edited src/app.py · ok" in text
    index = next(i for i, b in enumerate(view.transcript.blocks) if b.title == "$ pytest -q")
    header_line = view._drawn[index].first
    # A click on the header folds the block: its lines are hidden, the header says so.
    block = view.document().findBlockByNumber(header_line)
    rect = view.blockBoundingGeometry(block).translated(view.contentOffset())
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(30, int(rect.center().y()))
    )
    assert view.is_collapsed(index)
    assert not block.next().isVisible()
    assert block.text().startswith("▸ $ pytest -q")
    view.set_collapsed(index, False)
    assert block.next().isVisible()


def test_copy_a_block(qtbot, view):
    view.reset(claude_run())
    index = next(i for i, b in enumerate(view.transcript.blocks) if b.title == "$ pytest -q")
    view.copy_block(index)
    assert (
        QApplication.clipboard().text() == "$ pytest -q · exit 1\nExit code 1\n3 passed\n1 failed"
    )


def test_blocks_fold_and_copy_from_the_keyboard(qtbot, view):
    view.reset(claude_run())
    index = next(i for i, b in enumerate(view.transcript.blocks) if b.title == "$ pytest -q")
    header = view.document().findBlockByNumber(view._drawn[index].first)
    cursor = view.textCursor()
    cursor.setPosition(header.position())
    view.setTextCursor(cursor)
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert view.is_collapsed(index)
    qtbot.keyClick(view, Qt.Key.Key_Return)
    assert not view.is_collapsed(index)
    cursor.setPosition(header.next().position())  # inside the block's output
    view.setTextCursor(cursor)
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)  # nothing selected
    assert QApplication.clipboard().text().startswith("$ pytest -q · exit 1\nExit code 1")


def test_each_attempt_starts_on_its_own_line_under_its_header(qtbot, view):
    text = encode(
        [
            AttemptStart(1),
            OutputRecord("stdout", "before\necho after > afte", 100.0),
            AttemptStart(2, "sandbox recreated", 200.0),
            OutputRecord("stderr", "cairn: waiting for approval\n", 201.0),
        ]
    )
    view.reset(text)
    lines = view.toPlainText().split("\n")
    assert "echo after > afte" in lines
    attempt = next(line for line in lines if line.startswith("attempt 2"))
    assert attempt.startswith("attempt 2 · resumed: sandbox recreated · ")
    assert lines.index(attempt) < lines.index("cairn: waiting for approval")


def test_live_chunks_carry_their_time_and_stream(qtbot, view):
    view.reset("")
    view.add_chunk("stderr", marker(stream="stderr", at=1_000.0) + "warn\n")
    block = view.transcript.blocks[-1]
    assert block.started == 1_000.0
    assert block.lines[0].kind == "stderr"
    view.add_chunk("stdout", "later\n")  # no marker: stamped when it arrives
    assert view.transcript.blocks[-1].ended > 1_000.0
    assert view.toPlainText().endswith("warn\nlater")


def test_live_output_grows_the_last_block_in_place(qtbot, view):
    view.reset("")
    for i in range(50):
        view.add_chunk("stdout", f"line {i}\n")
    assert view.document().blockCount() == 51  # one header, fifty lines
    assert view.toPlainText().startswith("▾ output · ")
    assert "50 lines" in view.document().firstBlock().text()


def test_find_in_output_moves_between_matches(qtbot, view):
    view.reset("".join(f"line {i}{' needle' if i % 30 == 0 else ''}\n" for i in range(1, 100)))
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert view.find_bar.isVisible() and view.find_bar.field.hasFocus()
    qtbot.keyClicks(view.find_bar.field, "needle")
    assert view.find_bar.count.text() == "1 of 3"
    assert view.textCursor().block().text() == "line 30 needle"
    qtbot.keyClick(view.find_bar.field, Qt.Key.Key_Return)
    assert view.textCursor().block().text() == "line 60 needle"
    assert view.find_bar.count.text() == "2 of 3"
    qtbot.keyClick(view.find_bar.field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert view.textCursor().block().text() == "line 30 needle"
    view.find_bar.previous_button.click()
    assert view.find_bar.count.text() == "3 of 3"
    qtbot.keyClick(view.find_bar.field, Qt.Key.Key_Escape)
    assert not view.find_bar.isVisible()


def test_find_opens_a_folded_block_to_show_its_match(qtbot, view):
    view.reset(claude_run())
    index = next(i for i, b in enumerate(view.transcript.blocks) if b.title == "$ pytest -q")
    view.set_all_collapsed(True)
    view.open_find()
    view.find_bar.field.setText("1 failed")
    assert not view.is_collapsed(index)
    assert view.textCursor().selectedText() == "1 failed"


def test_the_pane_has_a_useful_height_and_remembers_it(qtbot, settings):
    first = OutputView(settings=settings)
    qtbot.addWidget(first)
    line = first.fontMetrics().lineSpacing()
    assert first.minimumHeight() >= 12 * line
    first.set_height(30 * line)
    first.remember_height()
    assert int(settings.value(HEIGHT_KEY)) == first.minimumHeight()
    second = OutputView(settings=settings)
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    assert second.minimumHeight() == first.minimumHeight()


def test_screenshot(qtbot, view):
    text = encode(
        [
            AttemptStart(1),
            OutputRecord("stdout", claude_run(), 1_700_000_000.0),
            OutputRecord("stdout", "cairn: step 1/2: make test\nok\n", 1_700_000_002.0),
            AttemptStart(2, "sandbox recreated", 1_700_000_100.0),
            OutputRecord("stdout", "cairn: step 2/2: make lint\nall clean\n", 1_700_000_103.5),
        ]
    )
    view.reset(text)
    view.finish(exit_code=0)
    view.set_collapsed(3, True)
    view.open_find()
    view.find_bar.field.setText("clean")
    view.grab().save("/tmp/shots/run_output_blocks.png")


def test_a_shell_run_in_the_window_shows_a_block_with_its_times(qtbot, shown):  # noqa: F811
    win, view, facade, task_id = shown
    win.resize(1024, 700)
    view.buttons[START].trigger()
    qtbot.waitUntil(lambda: "succeeded" in view.state_label.text(), timeout=30_000)
    qtbot.waitUntil(lambda: "second-line" in output_text(view), timeout=10_000)
    lines = output_text(view).split("\n")
    header = lines[0]
    # One block per step: what ran, when, how it ended, how many lines.
    assert header.startswith("▾ step 1/") and "$ echo first-line" in header, header
    assert "exit 0" in header and "1 line" in header, header
    assert lines[1] == "first-line"
    assert [line for line in lines if line.startswith("▾ step ")][1].startswith("▾ step 2/4 · ")
    assert "second-line" in lines
    line = view.output.fontMetrics().lineSpacing()
    assert view.output.height() >= 10 * line
    win.grab().save("/tmp/shots/window_run_output.png")


def test_a_very_long_block_lets_its_earliest_lines_go(qtbot, view, monkeypatch):
    monkeypatch.setattr(Transcript, "MAX_LINES", 100)
    view.reset("")
    for chunk in range(30):
        view.add_chunk("stdout", "".join(f"line {chunk * 40 + i}\n" for i in range(40)))
    doc = view.document()
    lines = view.toPlainText().split("\n")
    assert lines[-1] == "line 1199"
    assert doc.blockCount() - 1 == len(view.transcript.blocks[0].lines) <= 600
    assert lines[1] == view.transcript.blocks[0].lines[0].text
    assert "1,200 lines" in lines[0] and "not kept" in lines[0]


def test_a_step_header_after_an_unfinished_line_still_starts_its_block(view):
    view.reset("")
    view.add_chunk("stdout", "cairn: step 1/2: printf x\nno line endcairn: step 2/2: echo y\ny\n")
    lines = view.toPlainText().split("\n")
    assert lines[0].startswith("▾ step 1/2 · $ printf x") and lines[1] == "no line end"
    assert lines[2].startswith("▾ step 2/2 · $ echo y") and lines[3] == "y"


def test_cairns_launch_line_is_not_shown_as_output(view):
    view.reset("")
    view.add_chunk("stdout", '{"type":"cairn_launch","attempt":1}\nhello\n')
    assert "cairn_launch" not in view.toPlainText()
    assert "hello" in view.toPlainText()
