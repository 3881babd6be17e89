"""What Cairn sends of its own to a session's volumes on another machine (the tools, git
settings and approval decisions): only what differs from what the volume holds, whichever of
Cairn's processes sends it, so a file a running sandbox reads (the program rules) is never
rewritten, or missing for a moment, because a decision was sent beside it."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.sandbox.base import SandboxError
from core.sandbox.remote import (
    DECISIONS,
    PUSHED_FOLDER,
    TOOLS,
    RemoteDockerBackend,
    carrier_name,
)

SESSION = "s_push"
CARRIER = carrier_name(SESSION)


class FakeApi:
    """The engine's archive call: what each put held, by name (and its bytes)."""

    def __init__(self) -> None:
        self.puts: list[dict[str, bytes | None]] = []
        self.accept = True
        self.delay = 0.0

    def put_archive(self, container: str, path: str, data) -> bool:
        assert (container, path) == (CARRIER, "/v")
        time.sleep(self.delay)
        with tarfile.open(fileobj=io.BytesIO(data.read())) as tar:
            held = {}
            for m in tar.getmembers():
                assert (m.uid, m.gid) == (0, 0)
                f = tar.extractfile(m) if m.isfile() else None
                held[m.name] = f.read() if f is not None else None
        self.puts.append(held)
        return self.accept

    def containers(self, **_kw):
        return []

    def volumes(self, **_kw):
        return {"Volumes": []}


def backend(data: Path, api: FakeApi) -> RemoteDockerBackend:
    """A backend as a new process of Cairn makes it: nothing of an earlier one's memory."""
    return RemoteDockerBackend(
        data, SimpleNamespace(), host_name="far", client=SimpleNamespace(api=api)
    )


@pytest.fixture
def folders(tmp_path: Path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "supervisor.py").write_text("print('s')\n")
    decisions = tmp_path / "data" / "approvals" / "ws_1"
    (decisions / ".rules").mkdir(parents=True)
    (decisions / ".rules" / "exec_rules.py").write_text("RULES = 1\n")
    return tmp_path / "data", tools, decisions


def push(data: Path, api: FakeApi, tools: Path, decisions: Path, made=()) -> None:
    own = [(TOOLS, tools, (0, 0)), (DECISIONS, decisions, (0, 0))]
    backend(data, api)._put_folders(CARRIER, (), own=own, made=made)


def sent(api: FakeApi) -> list[set[str]]:
    return [set(p) for p in api.puts]


def test_the_first_push_sends_everything_and_an_unchanged_folder_nothing(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    assert sent(api) == [
        {
            "tools",
            "tools/supervisor.py",
            "decisions",
            "decisions/.rules",
            "decisions/.rules/exec_rules.py",
        }
    ]
    assert api.puts[0]["decisions/.rules/exec_rules.py"] == b"RULES = 1\n"
    push(data, api, tools, decisions)  # another process: no round trip at all
    assert len(api.puts) == 1


def test_a_new_decision_goes_alone_and_rules_rewritten_alike_are_not_sent(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    # Each launch places the rules again (same bytes, a new time); a judge writes a decision.
    rules = decisions / ".rules" / "exec_rules.py"
    rules.write_text("RULES = 1\n")
    os.utime(rules, ns=(1, 1))
    (decisions / "x_1").mkdir()
    (decisions / "x_1" / "ap_1.json").write_text('{"decision": "allow"}')
    push(data, api, tools, decisions)
    assert sent(api)[1] == {"decisions/x_1", "decisions/x_1/ap_1.json"}
    push(data, api, tools, decisions)
    assert len(api.puts) == 2
    # Rules of another release are sent (and only they).
    rules.write_text("RULES = 2\n")
    push(data, api, tools, decisions)
    assert sent(api)[2] == {"decisions/.rules/exec_rules.py"}
    assert api.puts[2]["decisions/.rules/exec_rules.py"] == b"RULES = 2\n"


def test_a_mode_change_or_a_link_is_sent_as_such(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    (tools / "supervisor.py").chmod(0o600)
    (tools / "alias").symlink_to("supervisor.py")
    push(data, api, tools, decisions)
    assert sent(api)[1] == {"tools/supervisor.py", "tools/alias"}


def test_a_volume_made_again_gets_everything(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    push(data, api, tools, decisions, made={DECISIONS})
    assert sent(api)[1] == {"decisions", "decisions/.rules", "decisions/.rules/exec_rules.py"}


def test_a_refused_push_is_sent_again_next_time(folders):
    data, tools, decisions = folders
    api = FakeApi()
    api.accept = False
    with pytest.raises(SandboxError, match="refused the files of tools, decisions"):
        push(data, api, tools, decisions)
    api.accept = True
    push(data, api, tools, decisions)
    assert sent(api)[1] == sent(api)[0]


def test_an_unreadable_record_means_everything_is_sent_again(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    (data / PUSHED_FOLDER / f"{CARRIER}.json").write_text("{not json")
    push(data, api, tools, decisions)
    assert sent(api)[1] == sent(api)[0]


def test_a_missing_folder_is_its_top_alone(tmp_path: Path):
    api = FakeApi()
    data = tmp_path / "data"
    push(data, api, tmp_path / "no-tools", tmp_path / "no-decisions")
    assert sent(api) == [{"tools", "decisions"}]
    push(data, api, tmp_path / "no-tools", tmp_path / "no-decisions")
    assert len(api.puts) == 1


def test_processes_pushing_at_once_take_turns_and_send_each_file_once(folders):
    data, tools, decisions = folders
    api = FakeApi()
    api.delay = 0.2
    threads = [threading.Thread(target=push, args=(data, api, tools, decisions)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(api.puts) == 1


def test_removing_the_session_forgets_what_its_volumes_held(folders):
    data, tools, decisions = folders
    api = FakeApi()
    push(data, api, tools, decisions)
    assert (data / PUSHED_FOLDER / f"{CARRIER}.json").is_file()
    backend(data, api).remove_session(SESSION)
    assert not list((data / PUSHED_FOLDER).iterdir())
    push(data, api, tools, decisions)
    assert sent(api)[1] == sent(api)[0]


def test_a_record_that_cannot_be_written_is_said_as_such_not_as_a_host_down(folders):
    data, tools, decisions = folders
    api = FakeApi()
    data.mkdir(parents=True, exist_ok=True)
    (data / PUSHED_FOLDER).write_text("a file where the folder goes")
    with pytest.raises(SandboxError, match="where Cairn records what it sent") as caught:
        push(data, api, tools, decisions)
    assert "free disk space" in (caught.value.hint or "")
    assert api.puts == []
