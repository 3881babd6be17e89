"""The app's log file, Help ▸ Show Log and Copy Diagnostics, and how refusals are logged."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

import pytest

from core.errors import CairnError, InputError
from gui.jobs import JobRunner
from gui.logs import diagnostics, install_file_log, log_path, log_tail
from gui.qt import QGuiApplication, QWidget


@pytest.fixture
def file_log(tmp_path):
    """A rotating log in a data folder, removed from the root logger afterwards."""
    root = logging.getLogger()
    before, filters, level = list(root.handlers), list(root.filters), root.level
    handler_filters = {h: list(h.filters) for h in before}
    path = install_file_log(tmp_path / "data")
    yield path
    for handler in [h for h in root.handlers if h not in before]:
        root.removeHandler(handler)
        handler.close()
    root.filters[:] = filters  # the redaction filter it added is taken off again
    for handler, kept in handler_filters.items():
        handler.filters[:] = kept
    root.setLevel(level)


def test_the_app_logs_to_a_rotating_file_in_the_data_folder(file_log, tmp_path):
    assert file_log == tmp_path / "data" / "logs" / "cairn.log"
    handler = next(
        h for h in logging.getLogger().handlers
        if isinstance(h, logging.handlers.RotatingFileHandler)
        and Path(h.baseFilename) == file_log
    )  # fmt: skip
    assert handler.maxBytes > 0 and handler.backupCount >= 1
    logging.getLogger("cairn.test").info("something happened")
    handler.flush()
    assert any("something happened" in line for line in log_tail(file_log))
    assert install_file_log(tmp_path / "data") == file_log  # a second call adds nothing
    assert [
        h for h in logging.getLogger().handlers
        if isinstance(h, logging.handlers.RotatingFileHandler)
    ].count(handler) == 1  # fmt: skip


def test_an_expected_refusal_is_one_line_at_info_and_a_failure_a_traceback_at_warning(
    qtbot, caplog
):
    runner = JobRunner()
    parent = QWidget()
    qtbot.addWidget(parent)
    caplog.set_level(logging.INFO, logger="gui.jobs")

    def refuse() -> None:
        raise InputError("that folder is a file")

    def break_down() -> None:
        raise CairnError("Docker did not answer")

    for work in (refuse, break_down):
        with qtbot.waitSignal(runner.sig_failed, timeout=5000):
            runner.job(work, what="try", parent=parent).run()
    refusal, failure = [r for r in caplog.records if r.name == "gui.jobs"][-2:]
    assert refusal.levelno == logging.INFO and "\n" not in refusal.getMessage()
    assert failure.levelno == logging.WARNING and "Traceback" in failure.getMessage()
    runner.shutdown()


def test_diagnostics_hold_versions_settings_and_the_logs_tail_but_no_secret_values(tmp_path):
    data = tmp_path / "data"
    log = log_path(data)
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(200)))
    settings = {"engines": {"claude-code": {"api_key_secret": "ANTHROPIC_API_KEY"}}}
    text = diagnostics(
        data, lambda: settings, qt_version="6.11.3", tool_version=lambda argv: f"{argv[0]} 1.0"
    )
    assert "Cairn " in text and "Qt 6.11.3" in text and "git: git 1.0" in text
    assert '"api_key_secret": "ANTHROPIC_API_KEY"' in text
    assert "line 199" in text and "line 100" not in text  # the tail only


def test_copy_diagnostics_puts_the_report_on_the_clipboard(qtbot, window):
    window.copy_diagnostics()
    qtbot.waitUntil(
        lambda: "diagnostics copied" in window.statusBar().currentMessage(), timeout=10_000
    )
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text().startswith("Cairn ")


def test_show_log_says_so_when_there_is_no_log_yet(qtbot, window):
    if window.context.data_dir and log_path(window.context.data_dir).exists():
        log_path(window.context.data_dir).unlink()
    window.show_log()
    qtbot.waitUntil(lambda: "no log file" in window.statusBar().currentMessage(), timeout=10_000)
