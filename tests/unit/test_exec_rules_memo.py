"""What the program rules keep while they classify one exec (an invocation's paths, git's parse)
is kept for those facts only: the same invocation judged with other facts is worked out again.
And resolve's shortcut for paths already normal gives what normpath gives."""

from __future__ import annotations

import posixpath

import pytest

from core.approvals_exec import (
    RULES,
    ExecFacts,
    classify_exec,
    resolve,
    unwrap,
)

HOME = "/home/agent"


def _rule(rule_id):
    return next(r for r in RULES if r.id == rule_id)


def test_paths_kept_for_one_exec_are_worked_out_again_for_other_links():
    plain = ExecFacts("/usr/bin/cat", ("cat", "notes"), cwd="/workspace")
    linked = ExecFacts(
        "/usr/bin/cat",
        ("cat", "notes"),
        cwd="/workspace",
        links={"notes": (f"{HOME}/.ssh/id_rsa", "/workspace/notes")},
    )
    (inv,) = unwrap(plain)
    reads = _rule("credential-read").matches
    assert not reads(inv, plain)
    assert reads(inv, linked)  # the same invocation, a link to a key now
    assert not reads(inv, plain)


def test_paths_kept_for_one_home_are_worked_out_again_for_another():
    agent = ExecFacts("/usr/bin/rm", ("rm", "-rf", "~/x"), cwd="/workspace", env={"HOME": HOME})
    scratch = ExecFacts("/usr/bin/rm", ("rm", "-rf", "~/x"), cwd="/workspace", env={"HOME": "/tmp"})
    (inv,) = unwrap(agent)
    deletes = _rule("rm-outside-workspace").matches
    assert deletes(inv, agent)
    assert not deletes(inv, scratch)  # ~ is /tmp there


def test_git_parse_kept_for_one_exec_is_worked_out_again_for_other_settings():
    plain = ExecFacts("/usr/bin/git", ("git", "p"), cwd="/workspace")
    aliased = ExecFacts(
        "/usr/bin/git",
        ("git", "p"),
        cwd="/workspace",
        env={"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "alias.p", "GIT_CONFIG_VALUE_0": "push"},
    )
    (inv,) = unwrap(plain)
    pushes = _rule("git-push").matches
    assert not pushes(inv, plain)
    assert pushes(inv, aliased)
    assert not pushes(inv, plain)


def test_a_verdict_is_the_same_when_asked_again():
    facts = ExecFacts("/usr/bin/git", ("git", "-c", "alias.p=push -f", "p"), cwd="/workspace")
    first = classify_exec(facts)
    assert first.rule == "git-force-push"
    assert classify_exec(facts) == first


@pytest.mark.parametrize(
    "word",
    ["x", "a/b", "/etc", "//etc", "a//b", "a/", "./a", "a/.", "a/..", "../../..", ".ssh", "~", "~/"]
    + ["~/.ssh", "", "/", "a/.b", "a/b/", "/a/../b", "...", "a/.../b"],
)
@pytest.mark.parametrize("cwd", ["/workspace", "/", "/workspace/", "//w", "rel", "", "/a/./b"])
def test_resolve_is_normpath_of_the_joined_path(word, cwd):
    path = HOME + word[1:] if word == "~" or word.startswith("~/") else word
    assert resolve(word, cwd, HOME) == posixpath.normpath(posixpath.join(cwd, path))
