"""Why a detached egress proxy could not start, as one CairnError line that callers park a run
with: the cause once, from this start only, and the fix when it is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import CairnError
from core.sandbox.egress import (
    EgressError,
    EgressPaths,
    ensure_running,
    running_pid,
    start_detached,
)


def _blocked_socket(tmp_path: Path) -> EgressPaths:
    paths = EgressPaths.for_session(tmp_path / "egress", "ses_test")
    paths.make_dirs()
    paths.socket.write_text("not a socket\n")
    return paths


def test_egress_errors_are_cairn_errors() -> None:
    assert issubclass(EgressError, CairnError)


def test_a_file_at_the_socket_path_is_one_line_with_the_fix(tmp_path: Path) -> None:
    paths = _blocked_socket(tmp_path)

    with pytest.raises(EgressError) as caught:
        start_detached(paths.socket, ["example.com:443"], tmp_path / "egress.log")

    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("the egress proxy failed to start: ")
    assert message.count("is not a socket") == 1
    assert "remove it" in message
    assert running_pid(paths.socket) is None
    assert paths.socket.read_text() == "not a socket\n"  # left for the person to look at


def test_a_second_failure_reports_only_its_own_output(tmp_path: Path) -> None:
    paths = _blocked_socket(tmp_path)
    with pytest.raises(EgressError) as first:
        start_detached(paths.socket, [], tmp_path / "egress.log")
    with pytest.raises(EgressError) as second:
        start_detached(paths.socket, [], tmp_path / "egress.log")

    assert str(second.value) == str(first.value)
    assert paths.stderr_file.read_text().count("is not a socket") == 2  # the file keeps both


@pytest.mark.parametrize("start", [start_detached, ensure_running])
def test_a_folder_that_cannot_be_made_is_an_egress_error(tmp_path: Path, start) -> None:
    (tmp_path / "egress").write_text("a file where the egress folder belongs\n")
    socket_path = EgressPaths.for_session(tmp_path / "egress", "ses_test").socket

    with pytest.raises(EgressError, match="the egress proxy cannot "):
        start(socket_path, [], tmp_path / "egress.log")
