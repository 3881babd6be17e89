"""Sandbox policy: validation and versioning."""

import pytest

from core.errors import InputError
from core.policy import Policy


def test_every_change_is_a_new_version_and_round_trips():
    p = Policy()
    q = p.changed(network="allowlist", allow=["127.0.0.1:8080"], limits={"pids": 64}, secrets=["a"])
    assert (p.version, q.version) == (1, 2)
    assert Policy.from_dict(q.to_dict()) == q
    assert q.allows_secret("a") and not q.allows_secret("b")
    assert Policy().allows_secret("anything")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"network": "wide-open"}, "unknown network mode"),
        ({"allow": ["no-port"]}, "host:port"),
        ({"allow": ["h:99999"]}, "host:port"),
        ({"limits": {"pids": 1}}, "limits"),
        ({"uid": 0}, "never runs as root"),
    ],
)
def test_bad_policies_are_refused_with_a_reason(changes, message):
    with pytest.raises(InputError, match=message):
        Policy().changed(**changes)
