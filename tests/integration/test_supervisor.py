"""The exec supervisor in the real hardened sandbox: disguised risky actions end in a judged
program start that is refused (the action does not happen) or approved (it does), ordinary
commands run unchanged, and signals reach the supervised tree.

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


@pytest.fixture
def box(tmp_path, sandbox_image, docker_client):
    """Run a shell script in a fresh hardened container with the supervisor mounted; yields
    run(script, risky=...) -> (CompletedProcess, judge)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(SUPERVISOR, tools / "supervisor.py")
    (tools / "policy.json").write_text(json.dumps(POLICY))
    names: list[str] = []

    def run(script: str, risky: str = "deny", timeout: float = 120, delay: float = 0.0):
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
