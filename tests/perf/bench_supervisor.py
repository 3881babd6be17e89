"""What the exec supervisor costs a build-like script, inside the hardened sandbox.

    .venv/bin/python tests/perf/bench_supervisor.py [--runs 3] [--image cairn-sandbox:1]
    pytest tests/perf -s -k supervisor

Four workloads, each timed with and without the supervisor in the same container: 2000
`/bin/true` from a shell loop (nothing but process starts: the worst case), a build-like script
(the image has no make: two parallel shell jobs, 600 short tool runs each — sed, grep, sort, wc,
cat in pipelines over generated files), the same build-like work on the same two file names each
round (every start after the first of its kind is one already judged: the line shows what is left
when nothing is judged in python), and one closer to an agent's work: git in two repositories at
once (add, commit, status, log). The supervisor runs as a run's does: every program start
classified by Cairn's program rules (none of these is asked). Target: at most 1.3x. The ratios
are printed, not asserted: first with the container on every CPU (the target), then on one CPU,
where the held process and the supervisor hand over on the same CPU (what the supervisor's own
work costs, without the wake-ups across CPUs). `--supervisor PATH`, given more than once,
measures several supervisors interleaved in the same container (say main's copy against this one); `--no-fast`
after it (`--supervisor PATH --no-fast`) runs that one without the compiled hot path, and
`--rules PATH` after it has that one read other program rules than this checkout's (say main's
core/approvals_exec.py, to measure what the rules cost), and `--fast-source FILE` after it has that
one use a compiled hot path built here from FILE (say main's exec-fast.c: an older supervisor
refuses a library of another version and would judge in python).

The compiled hot path (resources/sandbox/exec-fast.c) is used as the image has it; an image
without it gets one compiled here with the host's gcc (the same Debian as the image) and mounted
where the image recipe puts it, so the figures are the ones a built image gives.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR = ROOT / "resources/sandbox/supervisor.py"
RULES = ROOT / "core/approvals_exec.py"
FAST_SOURCE = ROOT / "resources/sandbox/exec-fast.c"
FAST_LIBRARY = "/usr/local/lib/cairn/exec-fast.so"
TARGET = 1.3

TRUE_LOOP = "i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i+1)); done\n"

BUILD = r"""
job() {
  mkdir -p /tmp/b/$1 && cd /tmp/b/$1
  i=0
  while [ $i -lt 120 ]; do
    printf 'int f%d(void) { return %d; }\n// TODO %d\n' $i $i $i > src$i.c
    sed 's/int/long/' src$i.c > obj$i.o
    grep -c TODO src$i.c > /dev/null
    cat obj$i.o | sort | wc -l > /dev/null
    i=$((i+1))
  done
}
rm -rf /tmp/b
job a & job b & wait
"""

# The same work on the same two file names each time round: every program start after the first
# of each kind is one the compiled path has seen, so nothing is judged in python. Beside the
# build-like line it shows what the judging of new argument lists costs, and what is left when
# none is judged (the kernel's hold, the trace to the exec event and the compiled path).
BUILD_REPEATED = BUILD.replace("src$i.c", "src.c").replace("obj$i.o", "obj.o")
# A change of BUILD's file names would silently leave the two the same work.
assert "$i.c" not in BUILD_REPEATED and "$i.o" not in BUILD_REPEATED, "BUILD_REPEATED is BUILD"

# A third, closer to what an agent runs: git in two repositories at once (each git command also
# starts helpers), 40 commits each.
GIT = r"""
job() {
  mkdir -p /tmp/g/$1 && cd /tmp/g/$1 && git init -q .
  i=0
  while [ $i -lt 40 ]; do
    echo "line $i" >> notes.txt
    git add notes.txt
    git -c user.name=b -c user.email=b@b commit -qm "step $i"
    git status --short > /dev/null
    git log -1 --oneline > /dev/null
    i=$((i+1))
  done
}
rm -rf /tmp/g
job a & job b & wait
"""

TIMER = r"""
import json, os, resource, subprocess, sys, time
os.environ.update(CAIRN_EXEC_ID="bench", CAIRN_APPROVAL_REQUESTS="/tmp/requests",
                  CAIRN_APPROVAL_DECISIONS="/tmp/decisions")
runs, cases, names = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
def sup(name):
    extra = ["--no-fast"] if name.endswith("[python]") else []
    folder = "/bench/%s" % name.split(" ")[0]
    if not extra and os.path.exists(folder + "/exec-fast.so"):
        extra = ["--fast", folder + "/exec-fast.so"]
    return ["python3", folder + "/supervisor.py", "--judge", "--rules",
            folder + "/exec_rules.py"] + extra + ["--"]
variants = [("plain", [])] + [(name, sup(name)) for name in names]
def cpu():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
out = {}
for name, script in cases.items():
    times = {}
    for _ in range(runs):
        for key, argv in variants:  # interleaved: each round runs every variant once
            c, t = cpu(), time.perf_counter()
            subprocess.run(argv + ["sh", "-c", script], check=True)
            times.setdefault(key, []).append(time.perf_counter() - t)
            times.setdefault(key + "_cpu", []).append(cpu() - c)
    out[name] = times
print(json.dumps(out))
"""


def measure(
    image: str,
    runs: int,
    supervisors: dict[str, Path] | None = None,
    rules: dict[str, Path] | None = None,
    sources: dict[str, Path] | None = None,
    *,
    one_cpu: bool = False,
) -> dict[str, dict[str, list[float]]]:
    """Times per workload: "plain", each supervisor's name, and the same with "_cpu". `rules`:
    the program rules a supervisor reads, by its name, when not this checkout's; `sources`: the
    exec-fast.c a supervisor's compiled hot path is built from, when not the image's;
    `one_cpu`: the container on the first CPU alone."""
    supervisors = supervisors or {"supervised": SUPERVISOR}
    rules = rules or {}
    sources = sources or {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, path in supervisors.items():
            own = folder / name.split(" ")[0]
            own.mkdir(exist_ok=True)
            (own / "supervisor.py").write_text(path.read_text())
            (own / "exec_rules.py").write_text(rules.get(name, RULES).read_text())
            if name in sources:
                compile_fast(sources[name], own / "exec-fast.so")
            own.chmod(0o755)
        mounts = []
        library = fast_library(image, folder)
        if library is not None:
            mounts = ["-v", f"{library}:{FAST_LIBRARY}:ro"]
        (folder / "timer.py").write_text(TIMER)
        folder.chmod(0o755)
        name = f"cairn-bench-supervisor-{uuid.uuid4().hex[:10]}"
        cases = json.dumps(
            {
                "2000 x /bin/true": TRUE_LOOP,
                "build-like (2 jobs)": BUILD,
                "build-like, repeated": BUILD_REPEATED,
                "git (2 jobs)": GIT,
            }
        )
        try:
            done = subprocess.run(
                [
                    *("docker", "run", "--rm", "--name", name, "--user", "1000:1000"),
                    *("--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only"),
                    *("--tmpfs", "/tmp", "--network", "none"),
                    *(("--cpuset-cpus", "0") if one_cpu else ("--cpus", "2")),
                    *("-v", f"{folder}:/bench:ro", *mounts, image),
                    *("python3", "/bench/timer.py", str(runs), cases),
                    json.dumps(list(supervisors)),
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=1800,
            )
        finally:
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def fast_library(image: str, folder: Path) -> Path | None:
    """A compiled hot path to mount into the container, when the image has none of its own."""
    has = subprocess.run(
        [
            *("docker", "run", "--rm", "--name", f"cairn-bench-supervisor-{uuid.uuid4().hex[:10]}"),
            *("--network", "none", image, "test", "-e", FAST_LIBRARY),
        ],
        capture_output=True,
    )
    if has.returncode == 0:
        print(f"compiled exec path: {image}'s own")
        return None
    if shutil.which("gcc") is None:
        print(f"compiled exec path: none ({image} has none and there is no gcc here): python only")
        return None
    print(f"compiled exec path: {FAST_SOURCE.name} compiled here, mounted at {FAST_LIBRARY}")
    return compile_fast(FAST_SOURCE, folder / "exec-fast.so")


def compile_fast(source: Path, built: Path) -> Path:
    """The compiled hot path from `source`, built with the host's gcc (the image's Debian)."""
    if shutil.which("gcc") is None:
        raise SystemExit(f"cannot build {source}: there is no gcc here")
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-o", str(built), str(source), "-lpthread"],
        check=True,
    )
    built.chmod(0o755)
    return built


def report(results: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """Print each supervisor against plain: medians, and the range of the per-round ratios."""
    ratios = {}
    print(
        f"\n{'workload':<22}{'variant':<12}{'plain s':>9}{'superv. s':>11}{'ratio':>7}"
        f"{'rounds':>13}{'plain cpu':>11}{'superv. cpu':>13}{'cpu ratio':>11}"
        f"  (target <= {TARGET}x)"
    )
    for name, times in results.items():
        plain = statistics.median(times["plain"])
        plain_cpu = statistics.median(times["plain_cpu"])
        for variant in [k for k in times if k != "plain" and not k.endswith("_cpu")]:
            watched = statistics.median(times[variant])
            watched_cpu = statistics.median(times[variant + "_cpu"])
            each = [w / p for w, p in zip(times[variant], times["plain"], strict=True)]
            ratios[name if variant == "supervised" else f"{name} [{variant}]"] = watched / plain
            print(
                f"{name:<22}{variant:<12}{plain:>9.3f}{watched:>11.3f}{watched / plain:>6.2f}x"
                f"{min(each):>7.2f}-{max(each):.2f}x{plain_cpu:>10.3f}{watched_cpu:>13.3f}"
                f"{watched_cpu / plain_cpu:>10.2f}x"
            )
    print(
        "(ratio: of the medians; rounds: the lowest and highest ratio of one round, each round "
        "running every variant once; cpu: user+system time of every process of the run, the "
        "supervisor's included; on a busy machine the wall ratio drifts, the cpu ratio much less)"
    )
    return ratios


def measure_both(image: str, runs: int, *choices: dict[str, Path] | None) -> None:
    """The ratios on every CPU (the target), then the same on one CPU: there, every hand-over
    between a held process and the supervisor stays on that CPU, so the second table shows what
    the supervisor's own work costs, and the difference what waking the other CPU adds (on a
    virtual machine whose idle CPUs halt, a wake-up across CPUs costs tens of microseconds and
    each program start has four hand-overs)."""
    print("\non every CPU (the target):")
    report(measure(image, runs, *choices))
    print("\non one CPU (the supervisor's own work, no wake-up across CPUs):")
    report(measure(image, runs, *choices, one_cpu=True))


def test_supervisor_overhead(sandbox_image):
    measure_both(sandbox_image, 3)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--image", default="cairn-sandbox:1")
    parser.add_argument(
        "--no-fast",
        action="append_const",
        dest="supervisor",
        const=None,
        help="also measure the supervisor given last without the compiled hot path",
    )
    parser.add_argument(
        "--supervisor",
        type=Path,
        action="append",
        help="another supervisor.py to measure instead (given twice or more: all of them, "
        "interleaved in the same container, named #1, #2...)",
    )
    parser.add_argument(
        "--rules",
        type=lambda text: ("rules", Path(text)),
        action="append",
        dest="supervisor",
        help="the program rules the supervisor given last reads (default: core/approvals_exec.py)",
    )
    parser.add_argument(
        "--fast-source",
        type=lambda text: ("fast", Path(text)),
        action="append",
        dest="supervisor",
        help="the exec-fast.c the compiled hot path of the supervisor given last is built from "
        "(default: the image's library)",
    )
    args = parser.parse_args()
    # --rules and --fast-source after a supervisor belong to it; the list keeps the order they
    # were given in
    given: list[Path | None] = []
    rules_of: dict[int, Path] = {}
    sources_of: dict[int, Path] = {}
    for value in args.supervisor or []:
        if isinstance(value, tuple):
            if not given or given[-1] is None:
                parser.error(f"--{value[0]} belongs to the --supervisor given before it")
            (rules_of if value[0] == "rules" else sources_of)[len(given) - 1] = value[1]
        else:
            given.append(value)
    if not given or given[0] is None:
        given.insert(0, SUPERVISOR)
    if len(given) == 1:
        supervisors = {"supervised": given[0]}
        rules = {"supervised": rules_of[0]} if 0 in rules_of else {}
        sources = {"supervised": sources_of[0]} if 0 in sources_of else {}
    else:
        supervisors, rules, sources = {}, {}, {}
        for i, path in enumerate(given, 1):
            if path is None:  # --no-fast: the one before, in python only
                name, path = f"#{i - 1} [python]", given[i - 2]
            else:
                name = f"#{i}"
                if i - 1 in rules_of:
                    rules[name] = rules_of[i - 1]
                if i - 1 in sources_of:
                    sources[name] = sources_of[i - 1]
            supervisors[name] = path
            print(
                f"{name} = {path}"
                + (f" (rules {rules[name]})" if name in rules else "")
                + (f" (compiled from {sources[name]})" if name in sources else "")
            )
    measure_both(args.image, args.runs, supervisors, rules, sources)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
