"""The exec supervisor in the real hardened sandbox: disguised risky actions end in a judged
program start that is refused (the action does not happen) or approved (it does), ordinary
commands run unchanged, and signals reach the supervised tree. Every test runs twice: judged all
in python (`--no-fast`), and with the compiled hot path (resources/sandbox/exec-fast.c: the
image's, or one compiled here with gcc and mounted where the image has it).

A small judge in the test reads the supervisor's requests from the mailbox (the same files the
host judge reads), classifies them with core.approvals_exec and writes the decision."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from core.approvals_exec import ExecFacts, classify_exec

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR = ROOT / "resources/sandbox/supervisor.py"
RULES = ROOT / "core/approvals_exec.py"
FAST_SOURCE = ROOT / "resources/sandbox/exec-fast.c"
FAST_LIBRARY = "/usr/local/lib/cairn/exec-fast.so"
HARDENED = [
    "--user",
    "1000:1000",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
    "--read-only",
    "--tmpfs",
    "/tmp",
    "--tmpfs",
    "/home/agent:uid=1000,gid=1000",
    "--network",
    "none",
]
# The fast path: programs allowed without asking; everything else goes to the judge.
POLICY = {
    "default": "ask",
    "rules": [
        {"programs": ["sh", "bash", "dash"], "program_from_stdin": True, "action": "ask"},
        {"programs": ["true", "echo", "sh", "bash", "dash", "printf", "sleep"], "action": "allow"},
    ],
}
SECRET = "SECRETKEY-5c1d2e"

SETUP = f"""
set -e
mkdir -p /home/agent/.ssh /home/agent/x
echo {SECRET} > /home/agent/.ssh/id_rsa
echo keep > /home/agent/x/file
G="git -c user.name=t -c user.email=t@t -c init.defaultBranch=main"
$G init -q --bare /tmp/remote.git
cd /workspace
$G init -q .
echo one > a && $G add a && $G commit -qm one
git remote add origin /tmp/remote.git
git push -q origin main 2>/dev/null
$G commit -q --amend -m rewritten
git -C /tmp/remote.git rev-parse main > /tmp/before
"""

CHECK = """
echo "REMOTE_SAME=$(test "$(git -C /tmp/remote.git rev-parse main)" = "$(cat /tmp/before)" && echo yes || echo no)"
echo "X_EXISTS=$(test -e /home/agent/x/file && echo yes || echo no)"
"""

DISGUISED = r"""
g''it pu''sh -f origin main
c=git; $c push --force origin main
git${IFS}push${IFS}-f origin main
/usr/lib/git-core/git-push -f origin main
echo push -f origin main | xargs git
git -c alias.p=push p -f origin main
python3 -c 'import os; os.system("gi"+"t push -f origin main")'
perl -e 'system("git","push","-f","origin","main")'
echo Z2l0IHB1c2ggLWYgb3JpZ2luIG1haW4= | base64 -d | sh
r''m -rf /home/agent/x
find /home/agent/x -exec rm -rf {} +
python3 -c 'import subprocess; subprocess.run(["rm","-rf","/home/agent/x"])'
f=/home/agent/; \rm -rf ${f%/}/x
c''at ~/.ssh/id_rsa
cat ~/.ss?/id_?sa
python3 -c 'import os; os.system("cat /home/agent/.ssh/id_rsa")'
base64 ~/.ssh/id_rsa
echo done
"""


class MiniJudge:
    """Answers the supervisor's requests: what core.approvals_exec flags gets `risky`, the rest
    is allowed. Keeps every request with its verdict."""

    def __init__(self, requests: Path, decisions: Path, risky: str, delay: float = 0.0):
        self.requests, self.decisions, self.risky = requests, decisions, risky
        self.delay = delay  # how long each answer takes (the exec stays held meanwhile)
        self.seen: list[tuple[dict, str, str | None]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        done: set[str] = set()
        while not self.stop.is_set():
            for path in sorted(self.requests.glob("ap_*.json")):
                if path.name in done:
                    continue
                done.add(path.name)
                raw = path.read_bytes()
                doc = json.loads(raw)
                verdict = classify_exec(ExecFacts.from_request(doc))
                decision = self.risky if verdict.needs_approval else "allow"
                self.seen.append((doc, decision, verdict.rule))
                time.sleep(self.delay)
                tmp = self.decisions / f".{path.name}.tmp"
                answer = {
                    "id": doc["id"],
                    "decision": decision,
                    "reason": "t",
                    # The host names the bytes it judged (the asker checks them).
                    "request_sha256": hashlib.sha256(raw).hexdigest(),
                }
                tmp.write_text(json.dumps(answer))
                tmp.chmod(0o644)
                tmp.rename(self.decisions / path.name)
            time.sleep(0.01)

    def __enter__(self) -> MiniJudge:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(5)

    def asked(self, decision: str) -> list[dict]:
        return [doc for doc, d, _rule in self.seen if d == decision]


@pytest.fixture(scope="session")
def fast_library(tmp_path_factory, sandbox_image) -> Path | None:
    """The compiled hot path to mount: None when the image has its own; compiled here with the
    host's gcc otherwise (the host's Debian is the image's); a skip when neither can be had."""
    has = subprocess.run(
        [
            *("docker", "run", "--rm", "--label", "test.cairn.suite=supervisor", "--network"),
            *("none", sandbox_image, "test", "-e", FAST_LIBRARY),
        ],
        capture_output=True,
    )
    if has.returncode == 0:
        return None
    if shutil.which("gcc") is None:
        pytest.skip("the image has no compiled exec path and there is no gcc here to build one")
    built = tmp_path_factory.mktemp("fast") / "exec-fast.so"
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(built), str(FAST_SOURCE)]
        + ["-lpthread"],
        check=True,
    )
    built.chmod(0o755)
    built.parent.chmod(0o755)
    return built


@pytest.fixture(params=["python", "compiled"])
def box(request, tmp_path, sandbox_image, docker_client):
    """Run a shell script in a fresh hardened container with the supervisor mounted; yields
    run(script, risky=...) -> (CompletedProcess, judge). `box.compiled`: whether the
    supervisor uses the compiled hot path in this run."""
    compiled = request.param == "compiled"
    library = request.getfixturevalue("fast_library") if compiled else None
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(SUPERVISOR, tools / "supervisor.py")
    shutil.copy(RULES, tools / "exec_rules.py")
    (tools / "policy.json").write_text(json.dumps(POLICY))
    names: list[str] = []

    def run(script: str, risky: str = "deny", timeout: float = 120, delay: float = 0.0):
        if not compiled:
            script = script.replace(
                "/cairn/tools/supervisor.py ", "/cairn/tools/supervisor.py --no-fast "
            )
        case = tmp_path / uuid.uuid4().hex[:8]
        workspace, requests, decisions = case / "ws", case / "requests", case / "decisions"
        for folder in (workspace, requests, decisions):
            folder.mkdir(parents=True)
        for folder in (workspace, requests):
            os.chown(folder, 1000, 1000)
        (case / "script.sh").write_text(script)
        name = f"cairn-test-supervisor-{uuid.uuid4().hex[:10]}"
        names.append(name)
        argv = [
            "docker",
            "run",
            "--rm",
            "--name",
            name,
            "--label",
            "test.cairn.suite=supervisor",
            *HARDENED,
            "-v",
            f"{tools}:/cairn/tools:ro",
            "-v",
            f"{case / 'script.sh'}:/cairn/script.sh:ro",
            "-v",
            f"{workspace}:/workspace",
            "-v",
            f"{requests}:/cairn/runs/exec1/requests",
            "-v",
            f"{decisions}:/cairn/decisions/exec1:ro",
            *(["-v", f"{library}:{FAST_LIBRARY}:ro"] if library else []),
            "-e",
            "CAIRN_EXEC_ID=exec1",
            "-e",
            "CAIRN_RUN_ID=run1",
            "-e",
            "CAIRN_APPROVAL_TIMEOUT=60",
            "-w",
            "/workspace",
            sandbox_image,
            "bash",
            "/cairn/script.sh",
        ]
        with MiniJudge(requests, decisions, risky, delay) as judge:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        return done, judge

    run.compiled = compiled  # type: ignore[attr-defined]
    yield run
    for name in names:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def supervised(body: str, *extra: str) -> str:
    """A container script: set up, run BODY under the supervisor, then report the evidence."""
    return (
        SETUP
        + "set +e\ncat > /tmp/attack.sh <<'ATTACK'\n"
        + body
        + "\nATTACK\n"
        + "python3 /cairn/tools/supervisor.py --judge --policy /cairn/tools/policy.json "
        + " ".join(extra)
        + " -- bash /tmp/attack.sh\necho SUPERVISOR_EXIT=$?\n"
        + CHECK
    )


def test_disguised_risky_actions_are_denied_and_named(box):
    done, judge = box(supervised(DISGUISED))
    out = done.stdout + done.stderr
    assert "SUPERVISOR_EXIT=0" in done.stdout, out  # `echo done` ran last
    assert "done" in done.stdout
    assert "REMOTE_SAME=yes" in done.stdout, out
    assert "X_EXISTS=yes" in done.stdout, out
    assert SECRET not in out
    assert "U0VDUkVUS0VZ" not in out  # the key in base64
    denied = judge.asked("deny")
    pushes = [
        d for d in denied if os.path.basename(d["program"]) == "git" and "push" in d["command"]
    ]
    rms = [d for d in denied if "/home/agent/x" in d["command"]]
    reads = [d for d in denied if "/home/agent/.ssh/id_rsa" in d["command"]]
    assert len(pushes) >= 6, [d["argv"] for d in denied]
    assert any(d["argv"][:2] == ["/usr/lib/git-core/git-push", "-f"] for d in pushes)
    assert any(d["argv"][:3] == ["git", "-c", "alias.p=push"] for d in pushes)
    assert any(d["argv"] == ["sh"] and d["stdin"] == "pipe" for d in denied)  # base64 | sh
    assert len(rms) >= 4, [d["argv"] for d in denied]
    assert any(d["argv"][0] == "rm" and d["program"] == "/usr/bin/rm" for d in rms)
    assert len(reads) >= 4, [d["argv"] for d in denied]
    for doc in denied:
        assert doc["cwd"] and doc["pid"] > 0 and doc["parents"], doc
        assert doc["tool"] == "exec" and doc["exec_id"] == "exec1"


# The same `sh -c` three times: the compiled path's cache lets the later ones go without the
# Python side, so what a card says started the push is read from the process, not remembered.
STARTED_BY = r"""
sh -c 'true'
sh -c 'true'
sh -c 'sleep 0.2; git push --force origin main; true'
sh -c 'sleep 0.2; git push --force origin main; true'
sh -c 'sleep 0.2; git push --force origin main; true'
"""


def test_a_card_names_the_programs_that_started_it(box):
    done, judge = box(supervised(STARTED_BY))
    out = done.stdout + done.stderr
    assert "SUPERVISOR_EXIT=0" in done.stdout and "REMOTE_SAME=yes" in done.stdout, out
    pushes = [d for d in judge.asked("deny") if d["argv"][:2] == ["git", "push"]]
    assert len(pushes) == 3, [d["argv"] for d in judge.asked("deny")]
    for doc in pushes:
        programs = [p["program"] for p in doc["parents"]]
        assert programs[0] == "sh -c 'sleep 0.2; git push --force origin main; true'", programs
        assert "bash /tmp/attack.sh" in programs, programs


def test_the_same_actions_happen_when_approved(box):
    body = (
        "c=git; $c push --force origin main\n"
        "python3 -c 'import os; os.system(\"cat /home/agent/.ssh/id_rsa\")'\n"
        "f=/home/agent/; \\rm -rf ${f%/}/x\n"
    )
    done, judge = box(supervised(body), risky="allow")
    assert "REMOTE_SAME=no" in done.stdout, done.stdout + done.stderr
    assert "X_EXISTS=no" in done.stdout
    assert SECRET in done.stdout
    rules = {rule for _doc, _d, rule in judge.seen}
    assert {"git-force-push", "credential-read", "rm-outside-workspace"} <= rules


def test_ordinary_commands_pass_through_unchanged(box):
    body = (
        "ls /cairn/tools\ngit status --short\npython3 -c 'print(1)'\n"
        "echo to-stderr >&2\nprintf 'no newline'\nexit 3\n"
    )
    script = (
        SETUP
        + "set +e\ncat > /tmp/ordinary.sh <<'X'\n"
        + body
        + "X\n"
        + "bash /tmp/ordinary.sh > /tmp/o1 2> /tmp/e1; echo plain=$?\n"
        + "python3 /cairn/tools/supervisor.py --judge --policy /cairn/tools/policy.json "
        + "-- bash /tmp/ordinary.sh > /tmp/o2 2> /tmp/e2; echo supervised=$?\n"
        + "cmp /tmp/o1 /tmp/o2 && echo SAME_OUT; cmp /tmp/e1 /tmp/e2 && echo SAME_ERR\n"
        + "cat /tmp/o2\n"
    )
    done, judge = box(script)
    assert "plain=3" in done.stdout and "supervised=3" in done.stdout, done.stdout + done.stderr
    assert "SAME_OUT" in done.stdout and "SAME_ERR" in done.stdout, done.stdout
    assert "policy.json" in done.stdout and "no newline" in done.stdout
    assert not judge.asked("deny")


def test_a_closed_pipe_ends_its_writer_as_it_does_unsupervised(box):
    # python3 ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: the
    # command must start with them as a shell would have left them.
    body = "yes | head -n 1; echo codes=${PIPESTATUS[*]}\n"
    script = (
        "cat > /tmp/pipe.sh <<'X'\n"
        + body
        + "X\n"
        + "bash /tmp/pipe.sh > /tmp/o1 2> /tmp/e1\n"
        + "python3 /cairn/tools/supervisor.py --judge --policy /cairn/tools/policy.json "
        + "-- bash /tmp/pipe.sh > /tmp/o2 2> /tmp/e2\n"
        + "cat /tmp/o1 /tmp/e1; echo ---; cat /tmp/o2 /tmp/e2\n"
    )
    done, _judge = box(script)
    plain, supervised_out = done.stdout.split("---\n")
    assert "codes=141 0" in plain, done.stdout
    assert supervised_out == plain, done.stdout + done.stderr


def test_sigterm_reaches_the_tree_and_the_exit_code_is_the_commands(box):
    script = r"""
cat > /tmp/t.sh <<'X'
trap 'echo got-term; exit 9' TERM
sleep 30 &
wait
X
python3 /cairn/tools/supervisor.py --policy /cairn/tools/policy.json -- bash /tmp/t.sh &
sup=$!
sleep 1.5
kill -TERM $sup
wait $sup
echo SUPERVISOR_EXIT=$?
sleep 0.5
echo SLEEPERS=$(ps -eo comm | grep -c '^sleep$' || true)
"""
    started = time.monotonic()
    done, _judge = box(script)
    assert "got-term" in done.stdout, done.stdout + done.stderr
    assert "SUPERVISOR_EXIT=9" in done.stdout
    assert "SLEEPERS=0" in done.stdout
    assert time.monotonic() - started < 25


def test_no_supervision_means_no_command(box):
    script = (
        "env -u CAIRN_EXEC_ID python3 /cairn/tools/supervisor.py --judge -- "
        "touch /tmp/ran; echo EXIT=$?; test -e /tmp/ran && echo RAN || echo NOT_RAN\n"
    )
    done, _judge = box(script)
    assert "EXIT=121" in done.stdout and "NOT_RAN" in done.stdout, done.stdout
    assert done.stderr.count("\n") == 1 and "did not start" in done.stderr


# A program of the tree tries to take the hold away: its own notification listener (which would
# receive execs first), ptrace, writing another process's memory. Each is refused, and a push
# afterwards is still asked.
UNDO_THE_HOLD = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_void_p]
class F(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]
class P(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(F))]
prog = (F * 1)(F(0x06, 0, 0, 0x7FC00000))  # every call to a listener of its own
fp = P(1, prog)
fd = libc.syscall(317, 1, 8, ctypes.addressof(fp))  # seccomp(SET_MODE_FILTER, NEW_LISTENER)
print("LISTENER", "refused" if fd < 0 and ctypes.get_errno() == errno.EPERM else fd)
libc.ptrace.restype = ctypes.c_long
print("TRACEME", "refused" if libc.ptrace(0, 0, None, None) == -1 else "allowed")
buf = ctypes.create_string_buffer(8)
local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
print("VM_WRITE", "refused" if libc.process_vm_writev(os.getppid(), local, 1, local, 1, 0) == -1 else "allowed")
"""


def test_the_hold_cannot_be_taken_over_or_undone(box):
    body = (
        "cat > /tmp/undo.py <<'PY'\n" + UNDO_THE_HOLD + "PY\n"
        "python3 /tmp/undo.py\n"
        "git push --force origin main\n"
    )
    done, judge = box(supervised(body))
    out = done.stdout + done.stderr
    for line in ("LISTENER refused", "TRACEME refused", "VM_WRITE refused"):
        assert line in done.stdout, out
    assert "REMOTE_SAME=yes" in done.stdout, out
    assert any(d["argv"][:3] == ["git", "push", "--force"] for d in judge.asked("deny")), out


# Asks to run a harmless `git log` and, while that exec is held waiting for its (slow) answer,
# another thread rewrites the argument strings in place into a force push. The kernel copies what
# is in memory when the exec goes on: the exec event sees the push, judges it again, and the
# denied push is killed before it runs.
REWRITE_WHILE_HELD = r"""
import ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
words = [b"git", b"log", b"-q", b"-1", b"--all"]
bufs = [ctypes.create_string_buffer(w, 32) for w in words]
argv = (ctypes.c_char_p * 6)(*[ctypes.cast(b, ctypes.c_char_p) for b in bufs], None)
def rewrite():
    time.sleep(0.4)
    for b, w in zip(bufs, [b"git", b"push", b"-f", b"origin", b"main"]):
        ctypes.memmove(b, w + b"\0", len(w) + 1)
threading.Thread(target=rewrite, daemon=True).start()
libc.execv(b"/usr/bin/git", argv)
print("EXEC_FAILED", ctypes.get_errno())
"""


# The same, from another process: any process of the sandbox's user can write a held process's
# memory through /proc/PID/mem (the filter cannot refuse an open by its path).
REWRITE_FROM_ANOTHER_PROCESS = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
words = [b"git", b"log", b"-q", b"-1", b"--all"]
bufs = [ctypes.create_string_buffer(w, 32) for w in words]
argv = (ctypes.c_char_p * 6)(*[ctypes.cast(b, ctypes.c_char_p) for b in bufs], None)
pid = os.fork()
if pid == 0:
    libc.execv(b"/usr/bin/git", argv)
    os._exit(99)
time.sleep(0.4)
fd = os.open("/proc/%d/mem" % pid, os.O_RDWR)
for b, w in zip(bufs, [b"git", b"push", b"-f", b"origin", b"main"]):
    os.pwrite(fd, w + b"\0", ctypes.addressof(b))
os.close(fd)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize(
    "program", [REWRITE_WHILE_HELD, REWRITE_FROM_ANOTHER_PROCESS], ids=["thread", "process"]
)
def test_an_argument_rewritten_while_the_exec_is_held_is_judged_again(box, program):
    body = "cat > /tmp/rewrite.py <<'PY'\n" + program + "PY\npython3 /tmp/rewrite.py\n"
    done, judge = box(supervised(body), delay=1.5)
    out = done.stdout + done.stderr
    assert "REMOTE_SAME=yes" in done.stdout, out
    allowed = [d["argv"] for d in judge.asked("allow")]
    denied = [d for d in judge.asked("deny")]
    assert ["git", "log", "-q", "-1", "--all"] in allowed, out
    assert any(d["argv"] == ["git", "push", "-f", "origin", "main"] for d in denied), out
    assert all(d["observed_after_exec"] for d in denied if d["argv"][:2] == ["git", "push"])


# Each pair runs the same words first where they are harmless (three times: the compiled path
# keeps the verdict) and then after something the verdict depends on changed: a file that becomes
# a link to a credential, a program name that leads elsewhere, stdin that becomes a pipe, the
# environment. The last of each pair must be asked (and is denied), never allowed from the cache.
CHANGED_FACTS = r"""
cd /workspace
echo hi > f
cat f; cat f; cat f
sed s/hi/ho/ f; sed s/hi/ho/ f; sed s/hi/ho/ f
mkdir -p d; ln -s d e; ls e/; ls e/; ls e/
rm f; ln -s /home/agent/.ssh/id_rsa f
cat f
ln -s /usr/bin/ls tool
./tool /home/agent/.ssh/id_rsa; ./tool /home/agent/.ssh/id_rsa; ./tool /home/agent/.ssh/id_rsa
rm tool; ln -s /usr/bin/cat tool
./tool /home/agent/.ssh/id_rsa
echo 'echo FROM-FILE' > s.sh
sh < s.sh; sh < s.sh; sh < s.sh
echo 'echo FROM-PIPE' | sh
/usr/bin/true; /usr/bin/true; /usr/bin/true
LD_PRELOAD=/nonexistent.so /usr/bin/true || echo PRELOAD-REFUSED
echo done
"""


def rules_supervised(body: str) -> str:
    """Like supervised, judged by the program rules, every verdict in /tmp/log.jsonl."""
    return (
        SETUP
        + "set +e\ncat > /tmp/attack.sh <<'ATTACK'\n"
        + body
        + "\nATTACK\n"
        + "python3 /cairn/tools/supervisor.py --judge --rules /cairn/tools/exec_rules.py "
        + "--log /tmp/log.jsonl -- bash /tmp/attack.sh\necho SUPERVISOR_EXIT=$?\n"
        + "echo LOG-START; cat /tmp/log.jsonl; echo LOG-END\n"
    )


def log_of(stdout: str) -> list[dict]:
    text = stdout.split("LOG-START\n", 1)[1].split("LOG-END", 1)[0]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_kept_verdict_never_allows_facts_that_changed(box):
    done, judge = box(rules_supervised(CHANGED_FACTS))
    out = done.stdout + done.stderr
    assert "SUPERVISOR_EXIT=0" in done.stdout, out
    assert SECRET not in out
    assert done.stdout.count("FROM-FILE") == 3 and "FROM-PIPE" not in done.stdout, out
    assert "PRELOAD-REFUSED" in done.stdout, out
    rules = [rule for _doc, decision, rule in judge.seen if decision == "deny"]
    assert rules.count("credential-read") == 2, judge.seen
    assert "pipe-to-interpreter" in rules and "preload" in rules, rules
    entries = log_of(done.stdout)
    cached = [e for e in entries if e.get("cached")]
    if box.compiled:
        # The harmless repeats were allowed by the compiled path (so the test above tried it).
        kept = {tuple(e["argv"]) for e in cached}
        assert {("cat", "f"), ("sh",), ("/usr/bin/true",)} <= kept, kept
        # A word ending in a slash that names nothing (a sed expression) is no reason to
        # judge again; one that names a link (`e/`, the folder it points to) always is.
        assert ("sed", "s/hi/ho/", "f") in kept, kept
        assert ("ls", "e/") not in kept, kept
        assert ("./tool", "/home/agent/.ssh/id_rsa") in kept, kept
    else:
        assert not cached
    for entry in cached:
        assert entry["verdict"] == "allow"


AGREEMENT = r"""
cd /workspace
i=0
while [ $i -lt 3 ]; do
  printf 'int f%d(void);\n' $i > src$i.c
  sed 's/int/long/' src$i.c > obj$i.o
  cat obj$i.o | sort | wc -l
  grep -c f src$i.c
  ls -la src$i.c > /dev/null
  i=$((i+1))
done
git status --short | head -n 3
env GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp git status
rm -rf /home/agent/x
find . -name 'src*' | sort
echo done
"""


def test_the_compiled_path_and_python_agree(box):
    """The same commands give the same verdicts whichever path judged (in some order: the
    programs of a pipeline start together)."""
    if not box.compiled:
        pytest.skip("compares the compiled path with python: one run of each")
    fast, fast_judge = box(rules_supervised(AGREEMENT))
    slow, slow_judge = box(rules_supervised(AGREEMENT).replace("--judge", "--no-fast --judge"))
    assert fast.stdout.split("LOG-START")[0] == slow.stdout.split("LOG-START")[0], (
        fast.stdout + fast.stderr + slow.stdout + slow.stderr
    )

    def verdicts(entries: list[dict]) -> list[tuple]:
        return sorted((tuple(e["argv"]), e["cwd"], e["stdin"], e["verdict"]) for e in entries)

    fast_log, slow_log = log_of(fast.stdout), log_of(slow.stdout)
    assert verdicts(fast_log) == verdicts(slow_log)
    assert any(e.get("cached") for e in fast_log) and not any(e.get("cached") for e in slow_log)
    asked = sorted(tuple(d["argv"]) for d, _decision, _rule in fast_judge.seen)
    assert asked == sorted(tuple(d["argv"]) for d, _decision, _rule in slow_judge.seen)
    assert asked, "nothing was asked: the script should ask at least the rm outside"


def test_a_library_that_cannot_be_loaded_leaves_the_judging_to_python(box):
    script = (
        "echo 'not a library' > /tmp/bad.so\n"
        "python3 /cairn/tools/supervisor.py --fast /tmp/bad.so --judge "
        "--rules /cairn/tools/exec_rules.py -- sh -c 'ls / > /dev/null; echo RAN'\n"
        "echo EXIT=$?\n"
        "python3 /cairn/tools/supervisor.py --fast /tmp/bad.so --judge "
        "--rules /cairn/tools/exec_rules.py -- sh -c 'rm -rf /home/agent/x; echo RM=$?'\n"
    )
    done, judge = box("mkdir -p /home/agent/x\n" + script)
    assert "RAN" in done.stdout and "EXIT=0" in done.stdout, done.stdout + done.stderr
    assert "RM=1" in done.stdout, done.stdout + done.stderr
    assert done.stderr.count("the compiled exec path cannot be used, judging in python") == 2
    assert any(d["argv"][:2] == ["rm", "-rf"] for d in judge.asked("deny"))


# A thread turns the argument of a held `cat` back and forth between a workspace file (allowed,
# and kept by the compiled path after its first time) and the private key, while the process
# execs it again and again: whatever was read when the exec was held, the exec event sees what
# the kernel copied, and the key is never printed.
FLIP_WHILE_EXECING = r"""
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
plain, secret = b"/workspace/abcdefghijkl", b"/home/agent/.ssh/id_rsa"
assert len(plain) == len(secret)
with open(plain, "w") as f:
    f.write("PLAIN\n")
for _ in range(60):
    pid = os.fork()
    if pid == 0:
        word = ctypes.create_string_buffer(plain, 32)
        argv = (ctypes.c_char_p * 3)(b"cat", ctypes.cast(word, ctypes.c_char_p), None)
        def flip():
            while True:
                ctypes.memmove(word, secret, len(secret))
                ctypes.memmove(word, plain, len(plain))
        threading.Thread(target=flip, daemon=True).start()
        libc.execv(b"/usr/bin/cat", argv)
        os._exit(99)
    os.waitpid(pid, 0)
print("FLIPS-DONE")
"""


def test_an_argument_flipped_during_a_kept_exec_is_judged_by_what_loaded(box):
    body = (
        "cat > /tmp/flip.py <<'PY'\n" + FLIP_WHILE_EXECING + "PY\n"
        "cat /workspace/abcdefghijkl 2>/dev/null; python3 /tmp/flip.py\n"
    )
    done, _judge = box(rules_supervised(body))
    out = done.stdout + done.stderr
    assert "FLIPS-DONE" in done.stdout and "SUPERVISOR_EXIT=0" in done.stdout, out
    assert SECRET not in out
    assert "PLAIN" in done.stdout, out  # the harmless one ran
