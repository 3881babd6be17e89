"""Program-level rules: every disguise of a risky action, once the shell has done its quoting,
expansion, functions and aliases, is an execve of the real program; normalising that execve and
classifying it is what these tests pin down (core/approvals_exec.py), plus the supervisor's own
pure helpers (resources/sandbox/supervisor.py)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from core.approvals_exec import (
    ALLOW,
    ASK,
    BadFacts,
    ExecFacts,
    classify_exec,
    identity_of,
    parse_git,
    parse_git_config,
    reads_program_from_stdin,
    unwrap,
)

ROOT = Path(__file__).resolve().parents[2]
HOME = "/home/agent"


def _load_supervisor():
    spec = importlib.util.spec_from_file_location(
        "cairn_supervisor", ROOT / "resources/sandbox/supervisor.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


supervisor = _load_supervisor()


def ex(program: str, *argv: str, **kw) -> ExecFacts:
    kw.setdefault("env", {"HOME": HOME, "PATH": "/usr/bin:/bin"})
    return ExecFacts(program=program, argv=tuple(argv), **kw)


def rule_of(facts: ExecFacts) -> str | None:
    return classify_exec(facts).rule


GIT = "/usr/bin/git"

# (the disguise as written in a script, the execve the supervisor sees once it runs)
PUSH_DISGUISES = [
    ("g''it pu''sh -f", ex(GIT, "git", "push", "-f")),
    ('"git" "push" "--force"', ex(GIT, "git", "push", "--force")),
    ("c=git; $c push --force", ex(GIT, "git", "push", "--force")),
    ("git${IFS}push${IFS}-f", ex(GIT, "git", "push", "-f")),
    ("git \\\n push \\\n --force", ex(GIT, "git", "push", "--force")),
    ('eval "g""it pu""sh -f"', ex(GIT, "git", "push", "-f")),
    ('g(){ git "$@"; }; g push -f', ex(GIT, "git", "push", "-f")),
    ("alias g=git; g push -f", ex(GIT, "git", "push", "-f")),
    ("if true; then git push -f; fi", ex(GIT, "git", "push", "-f")),
    ("\\git push origin +main", ex(GIT, "git", "push", "origin", "+main")),
    ("/usr/lib/git-core/git-push -f", ex(GIT, "/usr/lib/git-core/git-push", "-f")),
    ("echo push -f | xargs git", ex(GIT, "git", "push", "-f")),
    ("git -c alias.p=push p -f", ex(GIT, "git", "-c", "alias.p=push", "p", "-f")),
    (
        "git --work-tree /workspace push -f",
        ex(GIT, "git", "--work-tree", "/workspace", "push", "-f"),
    ),
    (
        "git -C /workspace push --force-with-lease",
        ex(GIT, "git", "-C", "/workspace", "push", "--force-with-lease"),
    ),
    ('python3 -c \'os.system("gi"+"t push -f")\'', ex(GIT, "git", "push", "-f")),
    ('perl -e \'system("git","push","-f")\'', ex(GIT, "git", "push", "-f")),
    ("echo Z2l0IHB1c2ggLWY= | base64 -d | sh", ex(GIT, "git", "push", "-f")),
    ("printf '\\147\\151\\164 push -f' > s; sh s", ex(GIT, "git", "push", "-f")),
    ("env git push -f", ex("/usr/bin/env", "env", "git", "push", "-f")),
    (
        "nice -n 5 timeout 10 git push -f",
        ex("/usr/bin/nice", "nice", "-n", "5", "timeout", "10", "git", "push", "-f"),
    ),
    (
        "stdbuf -oL git push --mirror",
        ex("/usr/bin/stdbuf", "stdbuf", "-oL", "git", "push", "--mirror"),
    ),
]


@pytest.mark.parametrize(("script", "facts"), PUSH_DISGUISES, ids=[s for s, _ in PUSH_DISGUISES])
def test_every_push_disguise_is_a_judged_force_push(script, facts):
    verdict = classify_exec(facts)
    assert verdict.action == ASK
    assert verdict.rule == "git-force-push", (script, verdict)
    assert verdict.what.startswith("git push")


def test_aliases_from_the_config_files_the_sandbox_sees():
    config = {
        f"{HOME}/.gitconfig": '[alias]\n\tp = push --force\n[Alias "x"]\n',
        "/workspace/.git/config": "[alias]\n  q = p\n",
    }
    assert rule_of(ex(GIT, "git", "q", "origin", git_config=config)) == "git-force-push"
    assert rule_of(ex(GIT, "git", "p", git_config=config)) == "git-force-push"


def test_alias_from_environment_settings():
    env = {
        "HOME": HOME,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "alias.ship",
        "GIT_CONFIG_VALUE_0": "push -f",
    }
    assert rule_of(ex(GIT, "git", "ship", env=env)) == "git-force-push"
    params = {"HOME": HOME, "GIT_CONFIG_PARAMETERS": "'alias.ship'='push --force'"}
    assert rule_of(ex(GIT, "git", "ship", env=params)) == "git-force-push"


def test_alias_loops_end():
    assert rule_of(ex(GIT, "git", "-c", "alias.a=b", "-c", "alias.b=a", "a")) is None


def test_shell_alias_is_asked():
    assert rule_of(ex(GIT, "git", "-c", "alias.x=!sh -c id", "x")) == "git-shell-alias"


def test_plain_push_asks_and_ordinary_git_passes():
    assert rule_of(ex(GIT, "git", "push", "origin", "main")) == "git-push"
    assert classify_exec(ex(GIT, "git", "status")).action == ALLOW
    assert classify_exec(ex(GIT, "git", "-C", "/workspace", "log", "--oneline")).action == ALLOW
    assert classify_exec(ex(GIT, "git", "commit", "-m", "push -f")).action == ALLOW


@pytest.mark.parametrize(
    "facts",
    [
        ex(GIT, "git", "-c", "core.hookspath=/tmp/h", "commit", "-m", "x"),
        ex(GIT, "git", "-c", "Core.HooksPath=/tmp/h", "commit"),
        ex(
            GIT,
            "git",
            "commit",
            env={
                "HOME": HOME,
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "core.hooksPath",
                "GIT_CONFIG_VALUE_0": "/tmp/h",
            },
        ),
        ex(GIT, "git", "config", "core.hooksPath", "/tmp/h"),
        ex(GIT, "git", "init", "--template=/tmp/t", "x"),
        ex(GIT, "git", "-c", "core.fsmonitor=/tmp/x", "status"),
    ],
)
def test_settings_that_run_programs_later_are_asked(facts):
    assert rule_of(facts) == "git-hooks-config"


def test_identity_of_dashed_helpers_and_multicall():
    assert identity_of(ex(GIT, "/usr/lib/git-core/git-push", "-f")) == ("git", ("push", "-f"))
    assert identity_of(ex("/usr/lib/git-core/git-push", "git-push")) == ("git", ("push",))
    assert identity_of(ex("/bin/busybox", "rm", "-rf", "/x")) == ("rm", ("-rf", "/x"))
    assert identity_of(ex("/usr/bin/python3.11", "python3", "-c", "1")) == ("python", ("-c", "1"))
    assert identity_of(ex("/usr/bin/dash", "sh", "-c", "x")) == ("sh", ("-c", "x"))


def test_unwrap_wrappers():
    layers = unwrap(
        ex(
            "/usr/bin/env",
            "env",
            "-i",
            "A=1",
            "-C",
            "/tmp",
            "nice",
            "-10",
            "timeout",
            "-s",
            "KILL",
            "5",
            "stdbuf",
            "-o",
            "L",
            "git",
            "push",
        )
    )
    assert [i.name for i in layers] == ["env", "nice", "timeout", "stdbuf", "git"]
    assert layers[-1].cwd == "/tmp"
    assert layers[-1].args == ("push",)
    split = unwrap(ex("/usr/bin/env", "env", "-S", "git push -f"))
    assert split[-1].name == "git" and split[-1].args == ("push", "-f")
    assert unwrap(ex("/usr/bin/xargs", "xargs", "-n", "1", "rm"))[-1].args_from_stdin


RM_OUTSIDE = [
    ex("/usr/bin/rm", "rm", "-rf", f"{HOME}/x"),
    ex("/usr/bin/rm", "rm", "-rf", "../home/agent/x", cwd="/workspace"),
    ex("/usr/bin/rm", "rm", "-r", "--", "/etc/x"),
    ex("/usr/bin/rm", "rm", "-rf", "/workspace"),
    ex("/usr/bin/find", "find", f"{HOME}/x", "-exec", "rm", "-rf", "{}", ";"),
    ex("/usr/bin/find", "find", HOME, "-name", "x", "-delete"),
    ex("/usr/bin/xargs", "xargs", "rm", "-rf"),
    ex("/usr/bin/env", "env", "rm", "-rf", f"{HOME}/x"),
    ex("/usr/bin/rmdir", "rmdir", f"{HOME}/x"),
]


@pytest.mark.parametrize("facts", RM_OUTSIDE, ids=[" ".join(f.argv) for f in RM_OUTSIDE])
def test_deleting_outside_the_workspace_is_asked(facts):
    assert rule_of(facts) == "rm-outside-workspace"


@pytest.mark.parametrize(
    "facts",
    [
        ex("/usr/bin/rm", "rm", "-rf", "/workspace/build"),
        ex("/usr/bin/rm", "rm", "-f", "app.py", cwd="/workspace/src"),
        ex("/usr/bin/rm", "rm", "-rf", "/tmp/x"),
        ex("/usr/bin/find", "find", ".", "-name", "*.pyc", "-delete"),
    ],
)
def test_deleting_inside_passes(facts):
    assert classify_exec(facts).action == ALLOW


CREDENTIAL_READS = [
    ex("/usr/bin/cat", "cat", f"{HOME}/.ssh/id_rsa"),
    ex("/usr/bin/cat", "cat", f"{HOME}/.ssh/id_ed25519"),  # `~/.ss?/id_?sa` after globbing
    ex("/usr/bin/cp", "cp", "-r", f"{HOME}/.aws", "/workspace/x"),
    ex("/usr/bin/base64", "base64", f"{HOME}/.netrc"),
    ex("/usr/bin/python3.11", "python3", f"{HOME}/.git-credentials"),
    ex("/usr/bin/tar", "tar", "czf", "/tmp/k.tgz", "../home/agent/.ssh", cwd="/workspace"),
    ex("/usr/bin/curl", "curl", "--data-binary", f"@{HOME}/.ssh/id_rsa"),
    ex("/usr/bin/cat", "cat", "--", "/root/.aws/credentials"),
]


@pytest.mark.parametrize(
    "facts", CREDENTIAL_READS, ids=[" ".join(f.argv) for f in CREDENTIAL_READS]
)
def test_credential_reads_are_asked(facts):
    assert rule_of(facts) == "credential-read"


@pytest.mark.parametrize(
    "facts",
    [
        ex("/usr/bin/sudo", "sudo", "id"),
        ex("/usr/bin/su", "su", "-c", "id"),
        ex("/usr/bin/doas", "doas", "sh"),
        ex("/usr/bin/env", "env", "sudo", "id"),
    ],
)
def test_privilege_escalation_is_asked(facts):
    assert rule_of(facts) == "privilege-escalation"


@pytest.mark.parametrize(
    "facts",
    [
        ex("/usr/bin/npm", "npm", "publish"),
        ex("/usr/bin/npm", "npm", "--registry", "http://x", "publish"),
        ex("/usr/bin/cargo", "cargo", "publish", "--allow-dirty"),
        ex("/usr/bin/twine", "twine", "upload", "dist/*"),
        ex("/usr/bin/python3", "python3", "-m", "twine", "upload", "dist/x.whl"),
        ex("/usr/bin/gh", "gh", "release", "create", "v1"),
    ],
)
def test_publishing_is_asked(facts):
    assert rule_of(facts) == "package-publish"


def test_npm_install_passes():
    assert classify_exec(ex("/usr/bin/npm", "npm", "install")).action == ALLOW


@pytest.mark.parametrize(
    ("argv", "stdin", "asked"),
    [
        (("sh",), "pipe", True),  # curl URL | sh
        (("bash", "-s", "--", "x"), "pipe", True),
        (("python3", "-"), "pipe", True),
        (("perl",), "socket", True),
        (("sh", "-c", "echo hi"), "pipe", False),
        (("sh", "script.sh"), "pipe", False),
        (("python3", "-c", "print(1)"), "pipe", False),
        (("python3", "-m", "json.tool"), "pipe", False),
        (("sh",), "tty", False),
        (("sh",), "file", False),
        (("bash", "-o", "pipefail"), "pipe", True),
    ],
)
def test_interpreter_reading_a_program_from_a_pipe(argv, stdin, asked):
    facts = ex(f"/usr/bin/{argv[0]}", *argv, stdin=stdin)
    assert (rule_of(facts) == "pipe-to-interpreter") is asked


def test_the_supervisor_and_the_host_agree_on_programs_from_stdin():
    cases = [
        ("sh", ["sh"]),
        ("bash", ["bash", "-s"]),
        ("bash", ["bash", "-x", "script"]),
        ("dash", ["sh", "-ec", "x"]),
        ("python3", ["python3"]),
        ("python3.11", ["python3", "-W", "ignore", "-"]),
        ("python3", ["python3", "-Wignore", "s.py"]),
        ("perl", ["perl", "-e", "1"]),
        ("perl", ["perl", "-I", "lib"]),
        ("node", ["node", "--eval", "1"]),
        ("node", ["node"]),
        ("ls", ["ls"]),
        ("zsh", ["zsh", "--", "-"]),
    ]
    for name, argv in cases:
        assert supervisor.reads_program_from_stdin(name, argv) == reads_program_from_stdin(
            name, argv
        ), (name, argv)


def test_ordinary_commands_pass():
    for facts in [
        ex("/usr/bin/ls", "ls", "-la"),
        ex("/usr/bin/python3.11", "python3", "-c", "print(1)"),
        ex("/usr/bin/dash", "sh", "-c", "make test"),
        ex("/usr/bin/cat", "cat", "/workspace/README"),
        ex("/usr/bin/ls", "ls", f"{HOME}/.ssh"),
    ]:
        assert classify_exec(facts).action == ALLOW, facts.argv


def test_preload_is_asked():
    facts = ex("/usr/bin/ls", "ls", env={"HOME": HOME, "LD_PRELOAD": "/tmp/x.so"})
    assert rule_of(facts) == "preload"


def test_git_config_parser():
    text = '[core]\n\thooksPath = "/tmp/h" ; comment\n[alias]\n\tP = push -f\n[remote "Origin"]\n\turl = x\n[bare]\n\tflag\n'
    parsed = parse_git_config(text)
    assert parsed["core.hookspath"] == "/tmp/h"
    assert parsed["alias.p"] == "push -f"
    assert parsed["remote.Origin.url"] == "x"
    assert parsed["bare.flag"] == "true"


def test_parse_git_reads_global_options():
    git = parse_git(
        ex(GIT, "git"),
        ["-C", "sub", "--git-dir=/x/.git", "-c", "a.b=c", "--no-pager", "log", "-1"],
        "/workspace",
    )
    assert git.subcommand == "log" and git.args == ("-1",)
    assert git.cwd == "/workspace/sub"
    assert git.config["a.b"] == "c"


def test_facts_from_a_supervisor_request():
    doc = {
        "program": GIT,
        "argv": ["git", "push"],
        "cwd": "/workspace",
        "env": {"HOME": HOME},
        "stdin": "pipe",
        "pid": 42,
        "parents": [{"pid": 1, "program": "bash x.sh"}],
        "script_line": {"number": 3, "text": "git push"},
        "git_config": {},
    }
    facts = ExecFacts.from_request(doc)
    assert facts.argv == ("git", "push") and facts.script_line == 3
    assert facts.parents == ("bash x.sh",)
    with pytest.raises(BadFacts):
        ExecFacts.from_request({"program": GIT, "argv": "git push"})


# -- the supervisor's own pure parts -----------------------------------------------------------


def test_supervisor_policy_first_match_and_default():
    policy = supervisor.Policy(
        {
            "default": "ask",
            "rules": [
                {"programs": ["git"], "args_any": ["push"], "action": "deny"},
                {"programs": ["sh", "bash"], "program_from_stdin": True, "action": "ask"},
                {"programs": ["git"], "args_prefix": ["status"], "action": "allow"},
                {"programs": ["true", "ls", "sh", "bash"], "action": "allow"},
            ],
        }
    )

    def facts(program, *argv, stdin="null"):
        made = supervisor.Exec(1, program, program, list(argv), "/workspace", {}, False, False)
        made._stdin = stdin
        return made

    assert policy.decide(facts(GIT, "git", "push"))[0] == "deny"
    assert policy.decide(facts(GIT, "git", "status"))[0] == "allow"
    assert policy.decide(facts(GIT, "git", "log"))[0] == "ask"
    assert policy.decide(facts("/usr/bin/dash", "sh", stdin="pipe"))[0] == "ask"
    assert policy.decide(facts("/usr/bin/dash", "sh", "-c", "x", stdin="pipe"))[0] == "allow"
    with pytest.raises(ValueError):
        supervisor.Policy({"rules": [{"programs": ["x"], "action": "maybe"}]})


def test_supervisor_refuses_other_architectures(monkeypatch):
    fake = os.uname_result((*os.uname()[:4], "aarch64"))
    monkeypatch.setattr(supervisor.os, "uname", lambda: fake)
    with pytest.raises(supervisor.SetupError, match="x86_64 only"):
        supervisor.check_arch()


def test_supervisor_filter_jumps_stay_inside_the_program():
    prog = supervisor.bpf_program()
    for i, (code, jt, jf, _k) in enumerate(prog):
        if code & 0x07 == 0x05:  # BPF_JMP
            assert i + 1 + jt < len(prog) and i + 1 + jf < len(prog)
    assert prog[-1][0] == 0x06  # ends in a return


def test_supervisor_env_subset_keeps_what_changes_programs():
    kept = supervisor.env_subset(
        [b"GIT_DIR=/x", b"LD_PRELOAD=/y.so", b"SECRET=1", b"PATH=/bin", b"junk"]
    )
    assert kept == {"GIT_DIR": "/x", "LD_PRELOAD": "/y.so", "PATH": "/bin"}


# -- gaps the disguise runs in a real sandbox showed (tests/integration/test_exec_disguises.py) --

DASH = "/usr/bin/dash"


@pytest.mark.parametrize(
    "facts",
    [
        # A step whose text names a hook or a key: the shell that runs it starts nothing risky;
        # the programs it starts are judged when they start.
        ex(DASH, "sh", "-c", "cp ~/h /workspace/./.git/hooks/commit-msg"),
        ex(DASH, "sh", "-c", "PATH=/w/bin:$PATH; cd .git/hooks && cp ~/h pre-commit"),
        ex(DASH, "sh", "-ec", "cat ~/.ssh/id_rsa > /workspace/k"),
        ex("/usr/bin/bash", "bash", "-lc", "rm -rf ~/x"),
        ex("/usr/bin/python3.11", "python3", "-c", "import os; os.system('cat ~/.ssh/id_rsa')"),
        ex("/usr/bin/perl", "perl", "-e", 'system("cp", "/home/agent/.ssh/id_rsa", "/w")'),
        ex("/usr/bin/perl", "perl", "-esystem('cat /home/agent/.ssh/id_rsa')"),
        ex("/usr/bin/node", "node", "--eval", "require('fs').readFileSync('/root/.ssh/id_rsa')"),
    ],
    ids=lambda f: " ".join(f.argv)[:40],
)
def test_program_text_is_code_not_a_path(facts):
    assert classify_exec(facts).action == ALLOW, classify_exec(facts)


def test_what_a_shell_is_given_besides_its_text_still_counts():
    # `sh -c 'cat "$1"' x FILE`: the positional arguments are paths as any others.
    assert rule_of(ex(DASH, "sh", "-c", 'cat "$1"', "x", f"{HOME}/.ssh/id_rsa")) == (
        "credential-read"
    )
    assert rule_of(ex("/usr/bin/python3", "python3", f"{HOME}/.ssh/id_rsa")) == ("credential-read")
    assert rule_of(ex("/usr/bin/cp", "cp", "~/h", "/workspace/./.git/hooks/x")) == (
        "git-hooks-write"
    )


@pytest.mark.parametrize(
    "facts",
    [
        ex("/usr/bin/cp", "cp", "-r", HOME, "/workspace/copy"),
        ex("/usr/bin/cp", "cp", "-a", f"{HOME}/", "/workspace/copy"),
        ex("/usr/bin/cp", "cp", "--recursive", "/home", "/workspace/copy"),
        ex("/usr/bin/tar", "tar", "czf", "/workspace/h.tgz", "~"),
        ex("/usr/bin/rsync", "rsync", "-a", "/", "/workspace/all"),
        ex("/usr/bin/grep", "grep", "-R", "PRIVATE KEY", HOME),
        ex("/usr/bin/find", "find", HOME, "-type", "f", "-exec", "cat", "{}", ";"),
    ],
    ids=lambda f: " ".join(f.argv)[:40],
)
def test_reading_a_whole_tree_that_holds_credentials_is_a_credential_read(facts):
    assert rule_of(facts) == "credential-read"


@pytest.mark.parametrize(
    "facts",
    [
        ex("/usr/bin/cp", "cp", HOME + "/notes.txt", "/workspace/"),
        ex("/usr/bin/cp", "cp", "-r", "/workspace/src", "/workspace/dst"),
        ex("/usr/bin/cp", "cp", "-r", f"{HOME}/project", "/workspace/p"),
        ex("/usr/bin/ls", "ls", "-la", HOME),
        ex("/usr/bin/du", "du", "-sh", HOME),
        ex("/usr/bin/tar", "tar", "xzf", "/workspace/a.tgz", "-C", "/workspace/out"),
        ex("/usr/bin/grep", "grep", "-r", "TODO", "/workspace"),
    ],
    ids=lambda f: " ".join(f.argv)[:40],
)
def test_ordinary_copies_and_listings_are_not_credential_reads(facts):
    assert classify_exec(facts).action == ALLOW, classify_exec(facts)


@pytest.mark.parametrize(
    "argv",
    [
        ("bash", "/dev/fd/63"),
        ("bash", "-x", "/dev/fd/63"),
        ("sh", "/proc/self/fd/3"),
        ("python3", "/dev/stdin"),
        ("bash", "--", "/dev/fd/11", "arg"),
    ],
)
def test_a_program_read_from_a_descriptor_is_a_pipe_to_an_interpreter(argv):
    # `bash <(curl ...)` is `bash /dev/fd/63`, whatever stdin is.
    facts = ex("/usr/bin/" + argv[0], *argv, stdin="null")
    assert rule_of(facts) == "pipe-to-interpreter"


def test_a_script_file_or_program_text_is_not_a_descriptor():
    assert rule_of(ex("/usr/bin/bash", "bash", "/workspace/build.sh")) is None
    assert rule_of(ex("/usr/bin/bash", "bash", "-c", "cat /dev/fd/0")) is None
    assert rule_of(ex("/usr/bin/cat", "cat", "/dev/fd/63")) is None


def test_a_copy_of_an_image_program_is_judged_as_that_program():
    tig = ExecFacts.from_request(
        {
            "program": "/workspace/tig",
            "argv": ["/workspace/tig", "push", "origin", "main"],
            "env": {"HOME": HOME},
            "same_as": ["/usr/bin/git", "/usr/lib/git-core/git"],
        }
    )
    verdict = classify_exec(tig)
    assert (verdict.rule, verdict.what) == ("git-push", "git push origin main")
    shell = ex("/home/agent/xs", "xs", stdin="pipe", same_as=("/usr/bin/dash",))
    assert rule_of(shell) == "pipe-to-interpreter"
    rm = ex("/workspace/del", "del", "-rf", f"{HOME}/x", same_as=("/usr/bin/rm",))
    assert rule_of(rm) == "rm-outside-workspace"
    assert rule_of(ex("/workspace/a.out", "./a.out", "push")) is None
    with pytest.raises(BadFacts):
        ExecFacts.from_request({"program": "/x", "argv": ["x"], "same_as": "/usr/bin/git"})


@pytest.mark.skipif(
    supervisor.elf_build_id("/bin/ls") is None, reason="needs a system ls with an ELF build id"
)
def test_supervisor_names_a_copied_binary_by_its_build_id(tmp_path):
    copy = tmp_path / "renamed"
    copy.write_bytes(Path("/bin/ls").read_bytes() + b"appended bytes change no build id")
    copy.chmod(0o755)
    found = supervisor.same_as(str(copy))
    assert found and all(Path(p).name == "ls" for p in found), found
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert supervisor.same_as(str(script)) == []
    assert supervisor.same_as("/usr/bin/ls") == []  # the image's own programs are named as they are


CAIRN_GIT_ENV = {
    "HOME": HOME,
    "GIT_CONFIG_GLOBAL": "/cairn/git/config",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}
CAIRN_GIT_CONFIG = {
    "/cairn/git/config": "[core]\n\thooksPath = /dev/null\n\tfsmonitor = false\n",
    "/workspace/.git/config": "[core]\n\tbare = false\n",
}
EVIL = "[core]\n\thooksPath = /home/agent/h\n"


def test_git_as_cairn_runs_it_is_not_asked_whatever_the_home_holds():
    config = {**CAIRN_GIT_CONFIG, f"{HOME}/.config/git/config": EVIL}
    facts = ex(GIT, "git", "commit", "-m", "x", env=CAIRN_GIT_ENV, git_config=config)
    assert classify_exec(facts).action == ALLOW


@pytest.mark.parametrize(
    ("env", "config"),
    [
        # Cairn's settings set aside, the global file pointed at one the run wrote.
        (
            {**CAIRN_GIT_ENV, "GIT_CONFIG_COUNT": "0", "GIT_CONFIG_GLOBAL": f"{HOME}/cfg"},
            {f"{HOME}/cfg": EVIL, "/workspace/.git/config": ""},
        ),
        # Both unset: git reads the home's own file.
        (
            {
                k: v
                for k, v in CAIRN_GIT_ENV.items()
                if k not in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_COUNT")
            },
            {f"{HOME}/.gitconfig": EVIL, "/workspace/.git/config": ""},
        ),
        (
            {**CAIRN_GIT_ENV, "GIT_CONFIG_COUNT": "0", "GIT_CONFIG_GLOBAL": f"{HOME}/cfg"},
            {f"{HOME}/cfg": "[core]\n\tfsmonitor = /home/agent/h/fsmonitor\n"},
        ),
    ],
)
def test_hooks_from_a_file_the_run_wrote_are_asked(env, config):
    facts = ex(GIT, "git", "commit", "-m", "x", env=env, git_config=config)
    assert rule_of(facts) == "git-hooks-config"


def test_an_included_file_is_asked():
    for argv in (
        ("git", "-c", f"include.path={HOME}/cfg", "commit"),
        ("git", "-c", "includeIf.gitdir:/workspace/.path=/home/agent/cfg", "status"),
    ):
        facts = ex(GIT, *argv, env=CAIRN_GIT_ENV, git_config=CAIRN_GIT_CONFIG)
        assert rule_of(facts) == "git-hooks-config", argv
    env = {**CAIRN_GIT_ENV, "GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_2": "include.path"}
    env["GIT_CONFIG_VALUE_2"] = f"{HOME}/cfg"
    assert rule_of(ex(GIT, "git", "log", env=env, git_config=CAIRN_GIT_CONFIG)) == (
        "git-hooks-config"
    )


def test_supervisor_reads_the_global_files_git_reads(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text("[user]\n\tname = home\n")
    (home / ".config" / "git" / "config").write_text("[user]\n\tname = xdg\n")
    cairn = tmp_path / "cairn-config"
    cairn.write_text("[user]\n\tname = cairn\n")

    def files(env):
        made = supervisor.Exec(1, GIT, GIT, ["git", "status"], str(tmp_path), env, False, False)
        return list(supervisor.git_config_files(made))

    assert files({"HOME": str(home), "GIT_CONFIG_GLOBAL": str(cairn)}) == [str(cairn)]
    assert files({"HOME": str(home)}) == [
        str(home / ".config" / "git" / "config"),
        str(home / ".gitconfig"),
    ]


def test_a_credential_on_stdin_is_a_credential_read():
    key = f"{HOME}/.ssh/id_rsa"
    cat = ExecFacts.from_request(
        {"program": "/usr/bin/cat", "argv": ["cat"], "stdin": "file", "stdin_path": key}
    )
    assert rule_of(cat) == "credential-read"
    plain = ex("/usr/bin/cat", "cat", stdin="file", stdin_path="/workspace/README")
    assert rule_of(plain) is None


def test_publish_is_asked_after_options_with_values():
    npm = ex("/usr/bin/npm", "npm", "--loglevel", "silent", "--registry", "http://r", "publish")
    assert rule_of(npm) == "package-publish"
    assert rule_of(ex("/usr/bin/npm", "npm", "--otp", "1", "--tag", "next", "publish")) == (
        "package-publish"
    )
    assert rule_of(ex("/usr/bin/npm", "npm", "install", "left-pad")) is None
    assert rule_of(ex("/usr/bin/docker", "docker", "run", "img", "x", "y", "push")) is None


@pytest.mark.parametrize("name", ["sg", "newgrp"])
def test_group_switching_is_escalation(name):
    assert rule_of(ex(f"/usr/bin/{name}", name, "root", "-c", "id")) == "privilege-escalation"


def test_git_aliases_match_whatever_their_case():
    assert rule_of(ex(GIT, "git", "-c", "alias.p=push", "P", "origin")) == "git-push"
    assert rule_of(ex(GIT, "git", "-c", "alias.Ship=push -f", "ship")) == "git-force-push"


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (("mv", f"{HOME}/project", "/tmp/gone"), "rm-outside-workspace"),
        (("mv", "-t", "/tmp", f"{HOME}/a", "/workspace/b"), "rm-outside-workspace"),
        (("mv", "--", "/etc/hosts", "/workspace/h"), "rm-outside-workspace"),
        (("mv", "/workspace/a", f"{HOME}/a"), None),
        (("mv", "-t", "/tmp", "/workspace/a", "/workspace/b"), None),
        (("mv", "-f", "/workspace/a.txt", "/workspace/b.txt"), None),
        (("mv", f"{HOME}/.cache/a", f"{HOME}/.cache/b"), None),
        (("mv", HOME, f"{HOME}/x"), "rm-outside-workspace"),
        (("mv", "-f", "/cairn/runs/r_1.1/step.tmp", "/cairn/runs/r_1.1/step"), None),
    ],
)
def test_moving_away_from_outside_the_workspace_is_a_deletion_there(argv, rule):
    assert rule_of(ex("/usr/bin/mv", *argv)) == rule


def test_a_program_without_a_file_is_asked_and_named_by_what_it_copies():
    memfd = "/memfd:x (deleted)"
    assert rule_of(ex(memfd, "anything")) == "fileless-program"
    assert rule_of(ex("/workspace/tool (deleted)", "tool")) == "fileless-program"
    copy = ex(memfd, "git", "push", "origin", same_as=("/usr/bin/git",))
    assert rule_of(copy) == "git-push"


@pytest.mark.parametrize(
    ("argv", "rule"),
    [
        (("xargs", "sh", "-c"), "pipe-to-interpreter"),
        (("xargs", "-0", "bash", "-c"), "pipe-to-interpreter"),
        (("xargs", "-I{}", "sh", "-c", "{}"), "pipe-to-interpreter"),
        (("xargs", "-I", "LINE", "sh", "-c", "echo; LINE"), "pipe-to-interpreter"),
        (("xargs", "-i", "python3", "-c", "{}"), "pipe-to-interpreter"),
        # The text is fixed; only its arguments come from the input.
        (("xargs", "sh", "-c", 'wc -l "$@"', "_"), None),
        (("xargs", "-I{}", "sh", "-c", 'wc -l "$1"', "_", "{}"), None),
    ],
)
def test_program_text_read_by_xargs_is_a_pipe_to_an_interpreter(argv, rule):
    assert rule_of(ex("/usr/bin/xargs", *argv, stdin="pipe")) == rule


@pytest.mark.parametrize("option", ["--forc", "--mirr", "--delet", "--force-with", "--prun"])
def test_abbreviated_force_options_are_force_pushes(option):
    assert rule_of(ex(GIT, "git", "push", option, "origin", "main")) == "git-force-push"


def test_unabbreviated_ordinary_push_options_are_plain_pushes():
    for option in ("--progress", "--dry-run", "--tags", "--set-upstream"):
        assert rule_of(ex(GIT, "git", "push", option, "origin")) == "git-push", option


@pytest.mark.parametrize(
    "path",
    [
        "/workspace/.git/modules/lib/hooks/pre-commit",
        "/workspace/.git/modules/a/b/config",
        "/workspace/.git/worktrees/wt/config.worktree",
        ".git/modules/lib/hooks",
    ],
)
def test_a_submodules_or_worktrees_hooks_and_config_are_where_git_finds_code(path):
    assert rule_of(ex("/usr/bin/cp", "cp", f"{HOME}/hook", path)) == "git-hooks-write"


def test_other_files_under_git_are_not_code_paths():
    for path in ("/workspace/.git/modules/lib/HEAD", "/workspace/.git/configs/x", "/w/config"):
        assert rule_of(ex("/usr/bin/cp", "cp", "/workspace/x", path)) is None, path


def test_where_a_link_leads_is_judged():
    links = {
        "/workspace/l/": (f"{HOME}/data", f"{HOME}/data"),
        "/workspace/l": (f"{HOME}/data", "/workspace/l"),
        "/workspace/k": (f"{HOME}/.ssh/id_rsa", "/workspace/k"),
    }
    rm = ExecFacts.from_request(
        {
            "program": "/usr/bin/rm",
            "argv": ["rm", "-rf", "/workspace/l/"],
            "links": {k: list(v) for k, v in links.items()},
        }
    )
    assert rule_of(rm) == "rm-outside-workspace"  # `link/`: the folder it points to
    # `rm link` removes the link, not what it points to.
    assert rule_of(ex("/usr/bin/rm", "rm", "-f", "/workspace/l", links=links)) is None
    assert rule_of(ex("/usr/bin/cat", "cat", "/workspace/k", links=links)) == "credential-read"
    with pytest.raises(BadFacts):
        ExecFacts.from_request({"program": "/x", "argv": ["x"], "links": ["/a"]})


def test_supervisor_tells_where_arguments_lead(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "link").symlink_to(target)
    (tmp_path / "ws" / "plain").write_text("x")
    made = supervisor.Exec(
        1,
        "/usr/bin/rm",
        "/usr/bin/rm",
        ["rm", "-rf", "link/", "link", "plain", "--x=link"],
        str(tmp_path / "ws"),
        {},
        False,
        False,
    )
    found = supervisor.links_of(made)
    assert found["link/"] == [str(target), str(target)]
    assert found["link"] == [str(target), str(tmp_path / "ws" / "link")]
    assert "plain" not in found and "-rf" not in found


def test_on_the_host_backend_the_workspace_is_where_the_folder_is():
    ws = "/home/u/.local/share/cairn/workspaces/ws_1"
    inside = ExecFacts(program="/usr/bin/rm", argv=("rm", "-rf", "build"), cwd=ws, workspace=ws)
    assert classify_exec(inside).action == "allow"
    outside = ExecFacts(
        program="/usr/bin/rm", argv=("rm", "-rf", "/home/u/src"), cwd=ws, workspace=ws
    )
    assert classify_exec(outside).rule == "rm-outside-workspace"
    whole = ExecFacts(program="/usr/bin/rm", argv=("rm", "-rf", ws), cwd="/", workspace=ws)
    assert classify_exec(whole).rule == "rm-outside-workspace"  # the workspace itself
    # In a container (the default) the folder is /workspace, whatever a request claims that is
    # not an absolute, normal path.
    for claimed in ("", "/", "relative", "/a/../b", None):
        doc = {"program": "/usr/bin/rm", "argv": ["rm", "-rf", "x"], "workspace": claimed}
        assert ExecFacts.from_request(doc).workspace == "/workspace"


def test_a_kernel_that_cannot_hold_execs_is_named_with_what_is_needed(monkeypatch):
    import ctypes
    import errno

    class Refusing:
        def prctl(self, *_args):
            return 0

        def syscall(self, *_args):
            ctypes.set_errno(errno.EINVAL)
            return -1

    monkeypatch.setattr(supervisor, "libc", Refusing)
    with pytest.raises(OSError, match=r"Linux 5\.5 or newer is needed"):
        supervisor.install_filter()


def test_the_supervisor_ends_without_the_interpreters_teardown(tmp_path: Path):
    """A worker may be starting a spare one as the command ends, and a thread that starts
    during the interpreter's teardown crashes it (SIGSEGV: a command that ended well reported
    139). The supervisor's status is its command's: it leaves at once, its output flushed."""
    import subprocess
    import sys

    marker = tmp_path / "torn-down"
    (tmp_path / "sitecustomize.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, str(ROOT / "resources/sandbox/supervisor.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.startswith("usage: supervisor.py")
    assert not marker.exists()
    # The check itself: the hook does run in a process that ends the ordinary way.
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, timeout=60)
    assert marker.exists()
