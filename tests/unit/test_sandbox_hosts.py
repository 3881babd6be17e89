"""Sandbox hosts: the built-in local Docker engine and rootless Podman, the settings' own
`hosts.<name>` entries and `defaults.host`, the backend each one makes, and what the Podman
backend does differently (keep-id, no open network, an exec's variables through a pipe)."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import CairnError, InputError
from core.health import (
    ACTION_SEND_IMAGE,
    ERROR,
    OK,
    WARNING,
    EngineFacts,
    check_host,
    run_checks,
    summary,
)
from core.sandbox.base import (
    Attached,
    Gone,
    LiveSession,
    SandboxBackend,
    SandboxError,
    SandboxSpec,
    SessionState,
    UnsupportedNetwork,
)
from core.sandbox.docker import DockerBackend
from core.sandbox.events import event_filters, parse_event
from core.sandbox.hosts import (
    LOCAL,
    PODMAN,
    SandboxHost,
    all_hosts,
    builtin_hosts,
    default_podman_url,
    parse_value,
    pick,
)
from core.sandbox.podman import ENV_PROLOGUE, EnvPipe, PodmanBackend
from core.sandboxes import backend_for_host
from core.settings import Settings

SOCKET = "unix:///run/user/1000/podman/podman.sock"


def test_the_built_in_hosts_are_the_local_docker_engine_and_this_users_podman():
    hosts = builtin_hosts({"XDG_RUNTIME_DIR": "/run/user/1234"})
    assert hosts[LOCAL] == SandboxHost(LOCAL, "docker", "unix:///var/run/docker.sock", True)
    assert hosts[PODMAN].address == default_podman_url(runtime_dir="/run/user/1234")
    assert builtin_hosts({"DOCKER_HOST": "unix:///tmp/d.sock"})[LOCAL].address == (
        "unix:///tmp/d.sock"
    )
    assert default_podman_url(0) == "unix:///run/podman/podman.sock"
    assert default_podman_url(1000, "") == "unix:///run/user/1000/podman/podman.sock"


def test_a_host_entry_is_an_engine_and_a_unix_socket():
    host = parse_value("lab", f"podman  {SOCKET}")
    assert (host.name, host.engine, host.address) == ("lab", "podman", SOCKET)
    assert host.value == f"podman {SOCKET}"
    assert host.socket_path == "/run/user/1000/podman/podman.sock"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("lab", SOCKET, "takes '<engine> <address>'"),
        ("lab", f"lxc {SOCKET}", "unknown engine 'lxc'"),
        ("lab", "docker tcp://10.0.0.2:2375", "must be a unix socket on this machine"),
        ("lab", "docker ssh:/me@build", "must be a unix socket on this machine"),
        ("lab", "docker unix:///run/../etc/x.sock", "must not hold '..'"),
        ("Lab!", f"docker {SOCKET}", "is not a host name"),
    ],
)
def test_a_bad_host_entry_says_what_is_wrong(name, value, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_value(name, value)


def test_picking_an_unknown_host_names_the_known_ones():
    hosts = all_hosts({"lab": f"docker {SOCKET}"})
    assert pick(hosts, None).name == LOCAL
    assert pick(hosts, "lab").engine == "docker"
    with pytest.raises(InputError, match=r"no sandbox host 'nope'.*known: lab, local, podman"):
        pick(hosts, "nope")


def test_settings_store_hosts_and_the_default_host(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CAIRN_HOST", raising=False)
    settings = Settings(tmp_path)
    changed = []
    settings.on_sandbox_change(lambda: changed.append(1))
    assert settings.host().name == LOCAL
    with pytest.raises(InputError, match="no sandbox host 'lab'"):
        settings.set("defaults.host", "lab")  # nothing by that name yet: nothing written
    assert not settings.path.exists()
    assert settings.set("hosts.lab", f"podman   {SOCKET}") == f"podman {SOCKET}"
    assert settings.set("defaults.host", "lab") == "lab"
    assert settings.host().address == SOCKET
    assert settings.get("hosts") == {"lab": f"podman {SOCKET}"}
    assert settings.keys()["hosts"] == ["lab", "local", "podman"]
    assert len(changed) == 2  # a new host and a new default host both reach the sandboxes
    monkeypatch.setenv("CAIRN_HOST", "podman")
    assert settings.host().name == PODMAN
    monkeypatch.setenv("CAIRN_HOST", "nope")
    with pytest.raises(InputError, match="CAIRN_HOST"):
        settings.host()
    assert settings.unset("hosts.lab")
    data = json.loads(settings.path.read_text())
    assert "hosts" not in data and data["defaults"]["host"] == "lab"


def test_a_host_broken_by_hand_in_the_file_is_named(tmp_path: Path):
    (tmp_path / "settings.json").write_text(json.dumps({"hosts": {"lab": "podman nowhere"}}))
    with pytest.raises(CairnError, match="unusable host.*hosts.lab"):
        Settings(tmp_path).hosts()


def test_each_host_makes_its_own_backend(tmp_path: Path):
    local = backend_for_host(builtin_hosts({})[LOCAL], tmp_path)
    assert type(local) is DockerBackend and local.address.startswith("unix://")
    podman = backend_for_host(parse_value("lab", f"podman {SOCKET}"), tmp_path)
    assert isinstance(podman, PodmanBackend) and podman.address == SOCKET
    other = backend_for_host(parse_value("other", "docker unix:///tmp/other.sock"), tmp_path)
    assert type(other) is DockerBackend and other.address == "unix:///tmp/other.sock"


# --- the Podman backend's differences ------------------------------------------------------------


def spec(tmp_path: Path, **overrides) -> SandboxSpec:
    values = dict(
        workspace_id="ws_1",
        session_id="ses_1",
        snapshot_id=None,
        workspace_root=tmp_path / "ws",
        home_dir=tmp_path / "home",
        runs_dir=tmp_path / "runs",
    )
    values.update(overrides)
    return SandboxSpec(**values)


class RootlessPodman(PodmanBackend):
    def rootless(self) -> bool:
        return True

    def service_uid(self) -> int:
        return 1000


def test_podman_sandboxes_have_no_open_network_and_map_the_user(tmp_path: Path):
    backend = RootlessPodman(tmp_path, base_url=SOCKET)
    assert backend.network_mode(spec(tmp_path, network="allowlist")) == "none"
    assert backend.engine_host_config(spec(tmp_path)) == {"UsernsMode": "keep-id"}
    backend.check_spec(spec(tmp_path, uid=1000, gid=1000))
    with pytest.raises(UnsupportedNetwork, match="no open network"):
        backend.check_spec(spec(tmp_path, network="open"))
    with pytest.raises(SandboxError, match="uid of Podman's user, 1000, not as uid 4321"):
        backend.check_spec(spec(tmp_path, uid=4321, gid=4321))
    state = SessionState("podman", "c1", "cairn-ses_1", "sha256:1", [], 1, None)
    info = {"Image": "sha256:1", "Config": {"User": "1:1"}, "HostConfig": {"NetworkMode": "none"}}
    reasons = backend.compare(info, state, spec(tmp_path, network="open"))
    assert any("which a Podman sandbox does not have" in r for r in reasons)


def test_a_missing_podman_service_says_how_to_start_it(tmp_path: Path):
    backend = PodmanBackend(tmp_path, base_url=f"unix://{tmp_path}/podman.sock")
    with pytest.raises(CairnError) as err:
        backend.check()
    assert "Podman" in str(err.value) and "podman" in (err.value.hint or "")


def test_an_execs_variables_pass_through_a_pipe_and_leave_nothing(tmp_path: Path):
    values = {"TOKEN": "s3cret 'quoted'\nline two", "PLAIN": "x"}
    pipe = EnvPipe(tmp_path, values, (os.getuid(), os.getgid()))
    assert pipe.path.parent == tmp_path and pipe.path.name.startswith(".env-")
    pipe.start()
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(pipe.path.read_text()))
    reader.start()
    reader.join(5)
    script = read[0]
    # Read back the way the sandbox's prologue does: the shell's own parser, nothing else.
    import subprocess

    out = subprocess.run(
        ["sh", "-c", ENV_PROLOGUE, "cairn-env", "/dev/stdin", "sh", "-c", 'printf %s "$TOKEN"'],
        input=script,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == values["TOKEN"]
    deadline = threading.Event()
    for _ in range(100):
        if not pipe.path.exists():
            break
        deadline.wait(0.01)
    assert not pipe.path.exists()
    assert list(tmp_path.iterdir()) == []


def test_podmans_event_words_are_dockers():
    raw = {"Type": "container", "Action": "remove", "Actor": {"ID": "c1", "Attributes": {}}}
    event = parse_event(raw)
    assert event is not None and event.action == "destroy" and event.ends


def test_another_data_folders_sandbox_events_are_not_ours(tmp_path):
    """Podman's event stream takes any of several labels where Docker takes all: the filter
    names the data folder alone, and an event of another data folder that gets through
    anyway is dropped."""
    ours = str(tmp_path.resolve())
    assert event_filters(tmp_path)["label"] == [f"cairn.data_dir={ours}"]

    def raw(folder: str) -> dict:
        labels = {"cairn.managed": "1", "cairn.data_dir": folder, "cairn.workspace": "ws_1"}
        return {"Type": "container", "Action": "die", "Actor": {"ID": "c1", "Attributes": labels}}

    assert parse_event(raw("/elsewhere/data"), ours) is None
    mine = parse_event(raw(ours), ours)
    assert mine is not None and mine.workspace_id == "ws_1"


# --- testing a host --------------------------------------------------------------------------------

FACTS = EngineFacts("4.3.1", "1.41", "sha256:" + "1" * 64, "/home/me/.local/share/containers")


class Usage:
    def __init__(self, free: int):
        self.free = free


def host_check(tmp_path: Path, *, facts=FACTS, free=50 * 1024**3, engine="podman", **kw):
    sock = tmp_path / "engine.sock"
    sock.touch()
    host = parse_value("lab", f"{engine} unix://{sock}")
    return check_host(
        host,
        "cairn-sandbox:1",
        probe_socket=kw.pop("probe_socket", lambda path, timeout: None),
        facts_of=kw.pop("facts_of", lambda address, image, timeout: facts),
        disk_usage=lambda path: Usage(free),
        **kw,
    )


def test_a_ready_host_says_its_version_image_and_free_disk(tmp_path: Path):
    check = host_check(tmp_path)
    assert check.state == OK and check.host == "lab" and check.title.endswith("(Podman)")
    assert "4.3.1" in check.facts[0] and "API 1.41" in check.facts[0]
    assert "cairn-sandbox:1 is there" in check.facts[1]
    assert "50.0 GiB free" in check.facts[2]


def test_a_host_without_resource_limits_says_so_and_stays_usable(tmp_path: Path):
    check = host_check(tmp_path, facts=replace(FACTS, limits=False))
    assert check.state == OK and check.note is not None
    assert "limits are not applied" in check.note and check.note in check.facts


def test_a_host_without_the_image_offers_to_send_it(tmp_path: Path):
    check = host_check(tmp_path, facts=replace(FACTS, image_id=None))
    assert check.state == ERROR
    assert "not on host lab" in check.detail
    assert check.actions() == [ACTION_SEND_IMAGE]
    assert check.command == "cairnctl host send-image lab"


def test_a_host_short_of_disk_says_so(tmp_path: Path):
    assert host_check(tmp_path, free=3 * 1024**3).state == WARNING
    assert host_check(tmp_path, free=512 * 1024**2).state == ERROR


def test_a_host_that_does_not_answer_says_how_to_start_it(tmp_path: Path):
    host = parse_value("lab", f"podman unix://{tmp_path}/none.sock")
    gone = check_host(host, "cairn-sandbox:1", which=lambda name: "/usr/bin/podman")
    assert gone.state == ERROR and "no socket" in gone.detail
    assert gone.command == "systemctl --user enable --now podman.socket"
    missing = check_host(host, "cairn-sandbox:1", which=lambda name: None)
    assert "Podman is not installed" in missing.detail and "uidmap" in (missing.fix or "")

    def refuse(path, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    refused = host_check(tmp_path, probe_socket=refuse)
    assert refused.state == ERROR and "refuses connections" in refused.detail

    def silent(address, image, timeout):
        raise TimeoutError("timed out")

    quiet = host_check(tmp_path, facts_of=silent)
    assert quiet.state == ERROR and "did not answer" in quiet.detail


def test_the_first_run_check_tests_the_default_host_instead_of_docker(tmp_path: Path):
    sock = tmp_path / "engine.sock"
    sock.touch()
    host = parse_value("lab", f"podman unix://{sock}")
    checks = run_checks(
        tmp_path,
        engines=[],
        host=host,
        probe_socket=lambda path, timeout: None,
        host_facts=lambda address, image, timeout: replace(FACTS, image_id=None),
        disk_usage=lambda path: Usage(50 * 1024**3),
        keyring_backend=object(),
    )
    assert [c.id for c in checks] == ["host", "keyring", "git", "disk"]
    result = summary(checks)
    assert not result.sandboxes and result.headline.startswith("The sandbox host is not usable")


def test_sending_the_image_to_the_local_engine_itself_is_refused(tmp_path: Path):
    from core.app import Cairn

    with Cairn(tmp_path / "data") as cairn:
        with pytest.raises(InputError, match="local Docker engine itself"):
            cairn.hosts.send_image("local")
        with pytest.raises(InputError, match="no sandbox host 'nope'"):
            cairn.hosts.send_image("nope")


# --- a task's sandbox on its host ---------------------------------------------------------------


class FakeLive(LiveSession):
    def exec_detached(self, argv, *, env=None, cwd="/workspace", run_id):  # pragma: no cover
        raise NotImplementedError

    def exec(self, argv, *, env=None, cwd="/workspace", timeout=60.0):  # pragma: no cover
        raise NotImplementedError

    def exec_stream(self, argv, *, env=None, cwd="/workspace"):  # pragma: no cover
        raise NotImplementedError

    def process_alive(self, pid, *, run_id=None):  # pragma: no cover
        return False

    def signal_process(self, pid, signal_name="TERM"):  # pragma: no cover
        return False

    def stats(self):  # pragma: no cover
        return {}

    def stop(self):  # pragma: no cover
        pass

    def destroy(self):  # pragma: no cover
        pass


class FakeEngine(SandboxBackend):
    """A host's engine in memory: containers by id; `down` makes every call fail."""

    name = "docker"
    capabilities = PodmanBackend.capabilities

    def __init__(self, label: str):
        self.label = label
        self.containers: dict[str, SandboxSpec] = {}
        self.down = False

    def _up(self) -> None:
        if self.down:
            raise SandboxError(f"{self.label} does not answer")

    def check(self) -> None:
        self._up()

    def create(self, spec, *, previous=None):
        self._up()
        generation = previous.generation + 1 if previous else 1
        cid = f"{self.label}-{len(self.containers) + 1}"
        self.containers[cid] = spec
        state = SessionState(
            self.name, cid, f"cairn-{spec.session_id}", "sha256:1", [], generation, spec.snapshot_id
        )
        return state, FakeLive(state, spec)

    def attach(self, state, spec):
        self._up()
        if state.container_id in self.containers:
            return Attached(FakeLive(state, spec))
        return Gone("no such container")

    def list_sessions(self):
        self._up()
        return []

    def remove(self, container_id_or_name):
        self._up()
        return self.containers.pop(container_id_or_name, None) is not None


def test_a_session_moves_to_the_host_its_task_chose(tmp_path: Path):
    from core.datadir import DataDir
    from core.models import Source, Workspace
    from core.policy import Policy
    from core.sandboxes import SandboxManager
    from core.store import Store

    data = DataDir.resolve(tmp_path / "data")
    store = Store(tmp_path / "cairn.db")
    engines = {"local": FakeEngine("local"), "lab": FakeEngine("lab")}
    manager = SandboxManager(
        data, store, engines["local"], "img:1", host="local", backend_for=engines.__getitem__
    )
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".git").mkdir()
    ws = Workspace("ws_1", "src_1", str(root), "b" * 40, None, "cairn/x", None, "active")
    store.add_source(Source("src_1", str(tmp_path / "src"), "plain", str(tmp_path / "v"), 1.0))
    store.add_workspace(ws)
    first = manager.ensure(ws, Policy(), "snap_1")
    assert first.record.host == "local" and list(engines["local"].containers) == ["local-1"]
    same = manager.ensure(ws, Policy(), None)
    assert same.path == "reattached"
    moved = manager.ensure(ws, Policy(), None, host="lab")
    assert moved.path == "recreated" and "moved from host local to lab" in moved.reasons[0]
    assert moved.record.host == "lab" and moved.record.generation == 2
    assert moved.record.snapshot_id == "snap_1"  # the same snapshot on the new host
    assert engines["local"].containers == {} and list(engines["lab"].containers) == ["lab-1"]
    assert store.session_for("ws_1").host == "lab"
    # Back, with the old host down: its container is left there, and the move says so.
    engines["lab"].down = True
    back = manager.ensure(ws, Policy(), None, host="local")
    assert "left as it is (lab does not answer)" in back.reasons[0]
    assert back.record.host == "local" and list(engines["lab"].containers) == ["lab-1"]
    found, unreachable = manager.found_sessions()
    assert unreachable == {}
    assert manager.host_of(replace(back.record, host=None, backend="podman")) == "podman"


def test_a_manager_given_one_backend_uses_it_for_every_host(tmp_path: Path):
    from core.datadir import DataDir
    from core.sandboxes import SandboxManager
    from core.store import Store

    manager = SandboxManager(
        DataDir.resolve(tmp_path / "data"), Store(tmp_path / "cairn.db"), FakeEngine("local")
    )
    assert manager.backend_of(None) is manager.backend
    assert manager.backend_of("lab") is manager.backend


def test_another_host_that_does_not_answer_leaves_its_sessions_unknown_only(tmp_path: Path):
    from core.app import Cairn
    from core.models import SessionRecord

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    with Cairn(tmp_path / "data") as cairn:
        made = cairn.tasks.new(src)
        record = SessionRecord("ses_1", made.workspace.id, "podman", "c1", "cairn-ses_1", None)
        record.host = "lab"
        cairn.ctx.store.put_session(record)
        manager = cairn.sandboxes
        manager.found_sessions = lambda: ({}, {"lab": "lab does not answer"})  # type: ignore[method-assign]
        status = cairn.views.status()
        assert status["problem"] is None  # the default host is fine: new sandboxes can be made
        assert status["host_problems"] == {"lab": "lab does not answer"}
        (shown,) = status["sessions"]
        assert shown["host"] == "lab" and shown["state"] == "unknown"
