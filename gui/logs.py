"""The app's log file and the diagnostics a person can paste into a bug report.

Owns where the desktop app logs (a rotating `logs/cairn.log` in the data folder, secret values
redacted) and what "Copy diagnostics" gathers: versions, the settings (names, never values) and
the log's last lines. Qt-free: the diagnostics are gathered in a job.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from core import __version__
from core.redact import install_log_redaction

LOG_FOLDER = "logs"
LOG_NAME = "cairn.log"
LOG_BYTES = 2 * 1024 * 1024  # one file; three older ones are kept beside it
LOG_BACKUPS = 3
TAIL_LINES = 60
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path(data_root: Path) -> Path:
    return Path(data_root) / LOG_FOLDER / LOG_NAME


def install_file_log(data_root: Path, level: int = logging.INFO) -> Path | None:
    """Log to the data folder's rotating log file from now on (values of secrets redacted);
    its path, or None when the folder cannot be written (logging goes on to stderr)."""
    path = log_path(data_root)
    root = logging.getLogger()
    if any(
        isinstance(h, logging.handlers.RotatingFileHandler) and Path(h.baseFilename) == path
        for h in root.handlers
    ):
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8"
        )
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot log to %s: %s", path, exc.strerror)
        return None
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    root.addHandler(handler)
    if root.level > level or root.level == logging.NOTSET:
        root.setLevel(level)
    for other in root.handlers:  # stderr keeps showing only what needs attention
        if other is not handler and not isinstance(other, logging.FileHandler):
            other.setLevel(max(other.level, logging.WARNING))
    install_log_redaction()
    return path


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of the log ([] when there is none yet)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()[-lines:]
    except OSError:
        return []


def _tool_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else f"unknown (exit code {out.returncode})"


def diagnostics(
    data_root: Path,
    settings: Callable[[], dict],
    *,
    qt_version: str = "",
    tool_version: Callable[[list[str]], str] = _tool_version,
) -> str:
    """A plain-text report for a bug: versions, the settings file (it holds secret names, never
    values) and the log's last lines."""
    try:
        current = json.dumps(settings(), indent=2, sort_keys=True)
    except Exception as exc:  # noqa: BLE001 - a report must come out whatever is broken
        current = f"(cannot be read: {exc})"
    lines = [
        f"Cairn {__version__}",
        f"Python {sys.version.split()[0]} on {platform.platform()}",
        f"Qt {qt_version}" if qt_version else "Qt (unknown)",
        f"git: {tool_version(['git', '--version'])}",
        f"docker: {tool_version(['docker', 'version', '--format', '{{.Server.Version}}'])}",
        f"data folder: {data_root}",
        "",
        "settings.json:",
        current,
        "",
        f"last lines of {log_path(data_root)}:",
        *log_tail(log_path(data_root)),
    ]
    return "\n".join(lines) + "\n"
