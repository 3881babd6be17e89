"""A run whose egress proxy cannot start is parked `interrupted` with the reason, and `cairnctl`
says why in one line, as for any other launch failure (not as an internal error)."""

from __future__ import annotations

import pytest

from core.sandbox.egress import EgressPaths
from tests.support import as_json, cairnctl, one_error_line

pytestmark = pytest.mark.docker


def test_a_proxy_that_cannot_start_parks_the_run_with_the_reason(task) -> None:
    data, task_id, _ = task
    # A sandbox under the default policy (no network) gives the task its session...
    assert as_json(cairnctl(data, "run", task_id, "--json", "--", "true"))["state"] == "succeeded"
    (session,) = as_json(cairnctl(data, "status", "--json"))["sessions"]
    # ...then the allowlist policy needs the proxy, whose socket path holds a plain file: the
    # proxy refuses to replace anything but a socket, so it cannot start.
    cairnctl(data, "policy", task_id, "--network", "allowlist", "--allow", "example.com:443")
    blocker = EgressPaths.for_session(data / "egress", session["session_id"]).socket
    blocker.parent.mkdir(parents=True)
    blocker.write_text("not a socket\n")

    failed = cairnctl(data, "run", task_id, "--", "true", check=False)

    line = one_error_line(failed)  # exit code 2, one line on stderr
    assert line.startswith("cairnctl: the egress proxy failed to start: "), line
    assert "internal error" not in line
    assert "is not a socket" in line and "remove it" in line
    run = as_json(cairnctl(data, "follow", task_id, "--json"))
    assert run["state"] == "interrupted"
    assert "the egress proxy failed to start" in run["note"]
    assert "is not a socket" in run["note"]

    # Nothing was lost: once the path is free, the parked run resumes under the allowlist.
    blocker.unlink()
    resumed = as_json(cairnctl(data, "resume", task_id, "--json"))
    assert (resumed["run_id"], resumed["state"]) == (run["run_id"], "succeeded")
