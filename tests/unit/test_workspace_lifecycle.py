"""The workspace lifecycle is an explicit transition table; quota and expiry are checked."""

import pytest

from core.errors import IllegalTransition, QuotaExceeded
from core.models import Workspace
from core.models import WorkspaceState as S
from core.workspaces import TRANSITIONS, branch_name, check_quota, check_transition, is_expired


def test_the_happy_path_is_allowed():
    for a, b in [
        (S.ALLOCATED, S.PREPARED),
        (S.PREPARED, S.ACTIVE),
        (S.ACTIVE, S.FROZEN),
        (S.FROZEN, S.ARCHIVED),
        (S.ARCHIVED, S.DESTROYED),
    ]:
        check_transition(a.value, b.value)


@pytest.mark.parametrize(
    "a,b",
    [
        (S.ALLOCATED, S.ACTIVE),
        (S.DESTROYED, S.PREPARED),
        (S.ARCHIVED, S.ACTIVE),
        (S.ACTIVE, S.ALLOCATED),
        (S.ACTIVE, S.ACTIVE),
    ],
)
def test_illegal_transitions_raise_with_what_is_allowed(a, b):
    with pytest.raises(IllegalTransition, match=f"from {a.value} to {b.value}"):
        check_transition(a.value, b.value)


def test_every_state_has_a_row_and_destroyed_is_final():
    assert set(TRANSITIONS) == set(S)
    assert TRANSITIONS[S.DESTROYED] == frozenset()


def _ws(tmp_path, **kw):
    return Workspace(
        "ws_1", "src_1", str(tmp_path), "b" * 40, None, "cairn/x", None, "prepared", **kw
    )


def test_quota_is_checked_against_the_tree_on_disk(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 200_000)
    assert check_quota(_ws(tmp_path, quota_bytes=10_000_000)) >= 200_000
    with pytest.raises(QuotaExceeded, match="over its quota"):
        check_quota(_ws(tmp_path, quota_bytes=100_000))


def test_expiry(tmp_path):
    assert not is_expired(_ws(tmp_path))
    assert is_expired(_ws(tmp_path, expires_at=100.0), now=200.0)
    assert not is_expired(_ws(tmp_path, expires_at=300.0), now=200.0)


def test_branch_names_follow_the_task():
    assert branch_name("Fix the login test!", "t_0abc123xyz") == "cairn/fix-the-login-test-123xyz"
    assert branch_name("???", "t_0abc123xyz").startswith("cairn/task-")
