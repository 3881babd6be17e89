"""What the program rules (core/approvals_exec.py) cost per exec, and whether another copy of
them gives the same verdicts.

    .venv/bin/python tests/perf/bench_exec_rules.py [--against OLD.py] [--execs 20000]
    pytest tests/perf -s -k exec_rules

The supervisor classifies every exec its cache does not know (a build's `sed ... src$i.c` is a
new one each time), so the rules' time is part of what it costs. Timed: the execs of the
supervisor benchmark's build-like and git workloads, as the supervisor asks about them (facts
read from the request, then classified), in thread CPU time, interleaved round by round with
`--against`'s copy when given (say main's: `git show main:core/approvals_exec.py > OLD.py`).

With `--against`, both copies also classify the same generated execs (wrappers, git options and
aliases, links, credentials, deletions, interpreters, copies of the image's programs...) and every
verdict (action, rule, reason, what) must be the same: a change for speed alone changes none. A
difference is printed and the exit status is 1. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "core/approvals_exec.py"

ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/home/agent",
    "LANG": "C.UTF-8",
    "GIT_CONFIG_GLOBAL": "/cairn/git/config",
}


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def request(program: str, argv: list[str], **more: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "program": program,
        "argv": argv,
        "cwd": "/tmp/b/a",
        "env": ENV,
        "stdin": "pipe",
        "stdin_path": "",
        "links": {},
        "git_config": {},
        "same_as": [],
        "workspace": "/workspace",
    }
    doc.update(more)
    return doc


def workload_execs() -> dict[str, list[dict[str, Any]]]:
    """The execs of bench_supervisor.py's build-like and git workloads."""
    build = []
    for i in range(100):
        build += [
            request("/usr/bin/sed", ["sed", "s/int/long/", f"src{i}.c"]),
            request("/usr/bin/grep", ["grep", "-c", "TODO", f"src{i}.c"]),
            request("/usr/bin/cat", ["cat", f"obj{i}.o"]),
            request("/usr/bin/sort", ["sort"]),
            request("/usr/bin/wc", ["wc", "-l"]),
        ]
    config = {"/tmp/g/a/.git/config": "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"}
    git = []
    for i in range(100):
        git += [
            request("/usr/bin/git", ["git", "add", "notes.txt"], git_config=config),
            request(
                "/usr/bin/git",
                ["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", f"step {i}"],
                git_config=config,
            ),
            request("/usr/bin/git", ["git", "status", "--short"], git_config=config),
            request("/usr/bin/git", ["git", "log", "-1", "--oneline"], git_config=config),
        ]
    return {"build-like": build, "git": git}


PROGRAMS = (
    *("/usr/bin/sed", "/usr/bin/cat", "/usr/bin/rm", "/usr/bin/git", "/usr/lib/git-core/git-push"),
    *("/bin/busybox", "/usr/bin/env", "/usr/bin/xargs", "/usr/bin/find", "/usr/bin/python3.11"),
    *("/bin/dash", "/bin/bash", "/usr/bin/mv", "/usr/bin/tar", "/usr/bin/cp", "/usr/bin/npm"),
    *("/usr/bin/sudo", "/memfd:x", "/tmp/x (deleted)", "/usr/bin/grep", "/usr/bin/nice"),
    *("/usr/bin/timeout", "/usr/bin/gh", "/usr/bin/shred", "/usr/bin/perl", "/usr/bin/node"),
)
WORDS = (
    *("-rf", "-r", "-c", "-e", "-s", "-", "--", "/", "~", "~/", "~/.ssh/id_rsa", "~/.ssh", ".."),
    *(".", "./x", "x/../..", "/tmp", "/tmp/", "/workspace", "/workspace/", ".git/config"),
    *("/workspace/.git/hooks/pre-commit", ".git/hooks", "//etc/shadow", "/etc/shadow", "/home"),
    *("/home/agent", "/root/.aws/credentials", "a//b", "a/./b", "src1.c", "push", "--force"),
    *("-f", "origin", "+main", ":main", "commit", "-m", "msg", "config", "core.hooksPath"),
    *("/dev/null", "-C", "sub", "alias.p=push", "p", "publish", "release", "create", "upload"),
    *("twine", "-exec", "{}", ";", "+", "-delete", "-I{}", "sh", "bash", "rm", "git", "cat"),
    *("X=1", "-u", "HOME", "-S", "rm -rf /", "--chdir=/", "5", "@~/.netrc", "key.pem", "-lc"),
    *("--output=/workspace/.git/config", "/proc/self/fd/3", "/dev/fd/63", "echo hi", "-a"),
    *("--recursive", "--eval", "print(1)", "pip", "--target-directory=/etc", "-t", "/etc", ""),
    *(".ssh/", "/workspace/.ssh", "x.key", "/etc/sudoers", "../../../root/.ssh/x", "init"),
    *("--template=/x", "core.sshCommand=x", "include.path=/x", "--mirr", "-d", "!sh"),
    *("alias.x=!sh", "log", "status"),
)
ENVS = (
    {},
    {"HOME": "/home/agent"},
    {"HOME": "/root"},
    {"HOME": "/tmp/h"},
    {"LD_PRELOAD": "x.so"},
    {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "alias.p", "GIT_CONFIG_VALUE_0": "push -f"},
    {"GIT_CONFIG_PARAMETERS": "'core.hooksPath'='/x'"},
    {"GIT_TEMPLATE_DIR": "/x"},
)
CONFIGS = (
    {},
    {"/cairn/git/config": "[core]\n hooksPath = /cairn/hooks\n"},
    {"/home/agent/.gitconfig": "[alias]\n p = push --force\n s = !sh\n[core]\nfsmonitor = x\n"},
    {"/workspace/.git/config": "[include]\npath=/x\n"},
)
CWDS = ("/workspace", "/tmp/b/a", "/", "/home/agent", "/workspace/sub", "/workspace/", "rel", "")
LINKED = ("/home/agent/.ssh/id_rsa", "/etc", "/workspace/x", "/root")


def generated_execs(count: int, seed: int = 17) -> list[dict[str, Any]]:
    """Execs built from words every rule family reads, in random order and company."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        program = rng.choice(PROGRAMS)
        first = program.rsplit("/", 1)[-1]
        if rng.random() < 0.2:
            first = rng.choice(["sh", "git-push", "ls", "rm", "x"])
        argv = [first, *(rng.choice(WORDS) for _ in range(rng.randint(0, 7)))]
        links = {
            word: [rng.choice(LINKED), rng.choice(["/workspace/l", "/home/agent/l"])]
            for word in argv[1:]
            if rng.random() < 0.15
        }
        out.append(
            request(
                program,
                argv,
                cwd=rng.choice(CWDS),
                env=rng.choice(ENVS),
                stdin=rng.choice(["pipe", "null", "file", "socket", "tty"]),
                stdin_path=rng.choice(["", "/home/agent/.ssh/id_rsa", "/workspace/x"]),
                links=links,
                git_config=rng.choice(CONFIGS),
                same_as=rng.choice([[], ["/usr/bin/git"], ["/usr/bin/rm", "/usr/bin/cat"]]),
                workspace=rng.choice(["/workspace", "/w/x", "/"]),
            )
        )
    return out


def verdict(rules: ModuleType, doc: dict[str, Any]) -> tuple[str, ...]:
    try:
        found = rules.classify_exec(rules.ExecFacts.from_request(doc))
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))
    return (found.action, str(found.rule), found.reason, found.what)


def differences(new: ModuleType, old: ModuleType, execs: list[dict[str, Any]]) -> list[str]:
    out = []
    for doc in execs:
        a, b = verdict(new, doc), verdict(old, doc)
        if a != b:
            out.append(f"{doc['argv']!r} in {doc['cwd']!r}: {a} (this copy) != {b}")
    return out


def per_exec(rules: ModuleType, execs: list[dict[str, Any]]) -> float:
    """Thread CPU microseconds per exec, facts read from the request and classified."""
    start = time.thread_time()
    for doc in execs:
        rules.classify_exec(rules.ExecFacts.from_request(doc))
    return (time.thread_time() - start) / len(execs) * 1e6


def measure(copies: dict[str, ModuleType], rounds: int) -> None:
    names = list(copies)
    print(f"\n{'workload':<12}" + "".join(f"{n + ' us/exec':>22}" for n in names), end="")
    print(f"{'ratio':>8}" if len(names) == 2 else "")
    for workload, execs in workload_execs().items():
        times: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(rounds):  # interleaved: each round times every copy once
            for name in names:
                times[name].append(per_exec(copies[name], execs))
        medians = [statistics.median(times[n]) for n in names]
        line = f"{workload:<12}" + "".join(
            f"{m:>10.1f} ({min(times[n]):.1f}-{max(times[n]):.1f})" for n, m in zip(names, medians)
        )
        print(line + (f"{medians[1] / medians[0]:>7.2f}x" if len(names) == 2 else ""))
    print(
        "(medians of the rounds, their range in brackets; ratio: the other copy's time / this one's)"
    )


def test_exec_rules_cost():
    measure({"this copy": load(RULES, "cairn_exec_rules_bench")}, 3)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another copy of core/approvals_exec.py")
    parser.add_argument("--execs", type=int, default=20000, help="generated execs to compare")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    copies = {"this copy": load(RULES, "cairn_exec_rules_bench")}
    if args.against is None:
        measure(copies, args.rounds)
        return 0
    copies["other"] = load(args.against, "cairn_exec_rules_other")
    execs = [*generated_execs(args.execs), *sum(workload_execs().values(), [])]
    found = differences(copies["this copy"], copies["other"], execs)
    for line in found[:20]:
        print("differs:", line)
    print(f"verdicts compared on {len(execs)} execs: {len(found)} differ")
    measure(copies, args.rounds)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
