"""Sandbox hosts on another machine, without one: the `hosts.<name>` entry of a Docker engine
reached over SSH, its test (ssh's failure in words, the disk asked there), the backend's
refusals, and the mirroring of a run folder from the sandbox host (framing, exactly once)."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import InputError
from core.health import ERROR, OK, EngineFacts, check_host
from core.sandbox import egress
from core.sandbox.base import MountSpec, SandboxError, SessionState
from core.sandbox.hosts import bridge_for, parse_value
from core.sandbox.mirror import HELPER_SCRIPT, WorkspaceMirror
from core.sandbox.remote import (
    HOME_FILES_SCRIPT,
    HostUnreachable,
    RemoteDockerBackend,
    RemoteWorkspaceMirror,
    _add_local_file,
    _apply,
    _home_name,
    _local_offsets,
    engine_volume_name,
    parse_sync,
)
from core.sandbox.ssh_bridge import SshUnavailable
from core.sandboxes import backend_for_host
from tests.support import LocalSandboxFiles
from tests.unit.test_sandbox_hosts import spec

ADDRESS = "ssh://me@build-box:2200"
FACTS = EngineFacts("20.10.24", "1.41", "sha256:" + "a" * 64, "/var/lib/docker")


def test_an_ssh_host_is_a_docker_engine_with_its_key_and_known_hosts(tmp_path: Path):
    host = parse_value("far", f"docker {ADDRESS}  key=/home/me/.ssh/id  known_hosts=/etc/kh")
    assert (host.engine, host.address, host.remote) == ("docker", ADDRESS, True)
    assert (host.key_file, host.known_hosts) == ("/home/me/.ssh/id", "/etc/kh")
    assert host.value == f"docker {ADDRESS} key=/home/me/.ssh/id known_hosts=/etc/kh"
    assert parse_value("far", host.value) == host  # what the settings store reads back the same
    plain = parse_value("far", "docker ssh://build-box")
    assert plain.remote and plain.key_file is None and plain.known_hosts is None
    bridge = bridge_for(host)
    assert bridge.target.port == 2200 and bridge.key_file == Path("/home/me/.ssh/id")
    backend = backend_for_host(host, tmp_path)
    assert isinstance(backend, RemoteDockerBackend) and backend.mount_type == "volume"
    assert backend.remote and backend.host_name == "far"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"podman {ADDRESS}", "only a Docker engine is reached over SSH"),
        (f"docker {ADDRESS} port=22", "not an SSH host option"),
        (f"docker {ADDRESS} key=", "not an SSH host option"),
        (f"docker {ADDRESS} key=id_ed25519", "needs an absolute path"),
        (f"docker {ADDRESS} key=/a/../b", "needs an absolute path"),
        (f"docker {ADDRESS} key=/a key=/b", "names key= twice"),
        ("docker unix:///run/d.sock key=/a", "for SSH hosts only"),
        ("docker ssh://-oProxyCommand=sh", "not a host name"),
        ("docker ssh://me@build:99999", "not a port"),
    ],
)
def test_a_bad_ssh_host_entry_says_what_is_wrong(value, message):
    with pytest.raises(InputError, match=message):
        parse_value("far", value)


class FakeBridge:
    """A bridge whose ssh answers as told."""

    def __init__(self, failure: str | None = None, free: int | None = 40 * 1024**3):
        self.failure = failure
        self.free = free
        self.closed = False
        self.asked_disk: list[str] = []

    def check(self) -> str:
        if self.failure:
            raise SshUnavailable(self.failure)
        return "1.41"

    def start(self) -> str:
        return "unix:///tmp/bridge.sock"

    def free_bytes(self, path: str) -> int | None:
        self.asked_disk.append(path)
        return self.free

    def close(self) -> None:
        self.closed = True


def remote_check(bridge: FakeBridge, facts: EngineFacts = FACTS):
    asked = []

    def facts_of(address, image, timeout):
        asked.append(address)
        return facts

    host = parse_value("far", f"docker {ADDRESS}")
    check = check_host(host, "cairn-sandbox:1", facts_of=facts_of, bridge_of=lambda h: bridge)
    return check, asked


def test_an_ssh_host_is_tested_through_its_bridge_and_its_disk_is_asked_there():
    bridge = FakeBridge()
    check, asked = remote_check(bridge)
    assert check.state == OK and check.title == "Sandbox host far (Docker over SSH)"
    assert asked == ["unix:///tmp/bridge.sock"]  # the API through the local socket
    assert bridge.asked_disk == ["/var/lib/docker"] and "40.0 GiB free" in check.facts[2]
    assert ADDRESS in check.facts[0] and bridge.closed
    missing, _ = remote_check(FakeBridge(), replace(FACTS, image_id=None))
    assert missing.state == ERROR and missing.command == "cairnctl host send-image far"
    unknown_disk, _ = remote_check(FakeBridge(free=None))
    assert unknown_disk.state == OK and len(unknown_disk.facts) == 2


def test_an_ssh_host_that_refuses_says_sshs_reason_not_a_transport_error():
    why = "the host key of ssh://me@build-box:2200 is not in /etc/kh: connect once with …"
    bridge = FakeBridge(failure=why)
    check, asked = remote_check(bridge)
    assert check.state == ERROR and check.detail == why and asked == []
    assert "hosts.far" in (check.fix or "")


def test_a_connection_that_fails_is_explained_by_ssh(tmp_path: Path):
    host = parse_value("far", f"docker {ADDRESS}")
    backend = RemoteDockerBackend(tmp_path, bridge_for(host), host_name="far")
    backend.bridge = FakeBridge(failure="ssh://me@build-box:2200 cannot be reached: refused")  # type: ignore[assignment]
    found = backend.translate(ConnectionAbortedError("Connection aborted."), "list the sandboxes")
    assert isinstance(found, HostUnreachable)
    assert "cannot be reached: refused" in found.message and "aborted" not in found.message
    with pytest.raises(HostUnreachable, match="sandbox host far cannot be reached"):
        backend.check()  # ssh's check comes before the first API call


def test_a_remote_sandbox_mounts_no_folder_of_this_machine(tmp_path: Path):
    backend = backend_for_host(parse_value("far", f"docker {ADDRESS}"), tmp_path)
    made = spec(tmp_path, git_settings_dir=tmp_path / "git")
    mounts = backend.sandbox_mounts(made)
    assert all(m.source.startswith("cairn-ses_1-") for m in mounts)
    assert {m.target for m in mounts} >= {"/workspace", "/home/agent", "/cairn/runs", "/cairn/git"}
    assert {m.target for m in mounts if m.read_only} == {
        "/workspace/.git/hooks",
        "/cairn/tools",
        "/cairn/decisions",
        "/cairn/git",
    }
    with pytest.raises(SandboxError, match="cannot mount folders of this machine"):
        backend.check_spec(spec(tmp_path, extra_mounts=((tmp_path / "bin", "/opt/engine"),)))


def test_a_remote_sandbox_reaches_the_proxy_through_a_folder_of_its_own(tmp_path: Path):
    backend = backend_for_host(parse_value("far", f"docker {ADDRESS}"), tmp_path)
    allowlist = spec(tmp_path, network="allowlist", egress_socket_dir=tmp_path / "e")
    backend.check_spec(allowlist)  # the egress tunnel carries it
    assert "allowlist" in backend.capabilities.network_modes
    tmpfs = backend.tmpfs_mounts(allowlist)
    assert {"/tmp", "/run", "/cairn/egress"} <= set(tmpfs)
    assert "uid=1000,gid=1000" in tmpfs["/cairn/egress"]
    assert "/cairn/egress" not in {m.target for m in backend.sandbox_mounts(allowlist)}
    state = SessionState("docker-ssh", "c1", "cairn-ses_1", "sha256:1", [], 1, None)
    without = {"Image": "sha256:1", "Config": {"User": "1000:1000"}, "HostConfig": {}}
    without["HostConfig"] = {"NetworkMode": "none", "Tmpfs": {"/tmp": ""}}
    # A sandbox made without the relay's folder (by an older Cairn) is made again under it.
    assert any("/cairn/egress" in r for r in backend.compare(without, state, allowlist))
    assert not any("/cairn/egress" in r for r in backend.compare(without, state, spec(tmp_path)))


def test_a_sandbox_found_without_its_proxy_running_gets_no_tunnel(tmp_path: Path):
    backend = RemoteDockerBackend(tmp_path, bridge_for(parse_value("far", f"docker {ADDRESS}")))
    backend.bridge = FakeBridge(failure="ssh://me@build-box:2200 cannot be reached")  # type: ignore[assignment]
    allowlist = spec(tmp_path, network="allowlist", egress_socket_dir=tmp_path / "e" / "sandbox")
    # Followed as it was made, no proxy serving: nothing is started, the host is not even asked.
    backend.connect_egress(allowlist, "c1")
    # With a proxy there, the host is asked first, and its refusal is ssh's sentence.
    egress.start_detached(tmp_path / "e" / "sandbox" / "egress.sock", [], tmp_path / "log")
    try:
        with pytest.raises(HostUnreachable, match="cannot be reached"):
            backend.connect_egress(allowlist, "c1")
    finally:
        egress.stop(tmp_path / "e" / "sandbox" / "egress.sock")


def test_an_engine_binary_is_a_content_addressed_volume_there(tmp_path: Path):
    backend = backend_for_host(parse_value("far", f"docker {ADDRESS}"), tmp_path)
    binary = tmp_path / "claude-2.1"
    binary.write_bytes(b"\x7fELF a binary")
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    made = spec(tmp_path, extra_mounts=((binary, "/cairn/engines/claude"),))
    backend.check_spec(made)
    engine = [m for m in backend.sandbox_mounts(made) if m.target == "/cairn/engines"]
    assert engine == [MountSpec(f"cairn-engine-claude-{digest}", "/cairn/engines", True)]
    # Found as it was made (the recorded mount names the volume): the same mount.
    as_made = spec(tmp_path, extra_mounts=((Path(engine[0].source), "/cairn/engines"),))
    assert [m for m in backend.sandbox_mounts(as_made) if m.target == "/cairn/engines"] == engine
    # A changed binary is another volume.
    binary.write_bytes(b"\x7fELF another binary")
    assert backend.sandbox_mounts(made)[-1].source != engine[0].source
    # A package folder (Codex's) is a volume in its place, named by everything in it.
    package = tmp_path / "package"
    (package / "bin").mkdir(parents=True)
    (package / "bin" / "codex").write_bytes(b"\x7fELF codex")
    (package / "bin" / "rg").symlink_to("codex")
    codex = spec(tmp_path, extra_mounts=((package, "/cairn/engines/tool"),))
    backend.check_spec(codex)
    (mount,) = [m for m in backend.sandbox_mounts(codex) if m.target.startswith("/cairn/engines")]
    assert mount.target == "/cairn/engines/tool" and mount.read_only
    assert mount.source.startswith("cairn-engine-tool-")
    (package / "bin" / "codex").write_bytes(b"\x7fELF codex, another build")
    assert backend.sandbox_mounts(codex)[-1].source != mount.source
    (package / "bin" / "codex").write_bytes(b"\x7fELF codex")
    assert backend.sandbox_mounts(codex)[-1].source == mount.source  # by content, not by time
    # Codex's settings reach the home there at each launch (send_home_files): it runs there.
    backend.check_spec(spec(tmp_path, extra_mounts=((package, "/cairn/engines/codex"),)))
    with pytest.raises(SandboxError, match="neither a file nor a folder"):
        backend.check_spec(
            spec(tmp_path, extra_mounts=((tmp_path / "gone", "/cairn/engines/claude"),))
        )
    two = ((binary, "/cairn/engines/claude"), (binary, "/cairn/engines/other"))
    with pytest.raises(SandboxError, match="two engine binaries in one folder"):
        backend.check_spec(spec(tmp_path, extra_mounts=two))
    with pytest.raises(SandboxError, match="cannot name an engine binary"):
        engine_volume_name("../x", digest)


# --- mirroring a run folder ------------------------------------------------------------------


def frames(*parts: bytes) -> bytes:
    return b"".join(parts) + b"E\n"


def test_the_sync_stream_is_read_whole_or_not_at_all():
    data = frames(b"W 4 pid\n1234", b"A 0 6 stdout\nhello\n", b"W 0 requests/a.json\n")
    assert parse_sync(data) == [
        ("W", "pid", 0, b"1234"),
        ("A", "stdout", 0, b"hello\n"),
        ("W", "requests/a.json", 0, b""),
    ]
    assert parse_sync(data[:-2]) is None  # cut short: no end mark
    assert parse_sync(b"A 0 9 stdout\nhello\nE\n") is None  # fewer bytes than announced
    assert parse_sync(frames(b"A 0 1 ../x\nz")) is None  # never outside the run folder
    assert parse_sync(frames(b"A 0 1 /etc/x\nz")) is None
    assert parse_sync(frames(b"X 1 y\nz")) is None


def test_output_arrives_exactly_once_and_small_files_whole(tmp_path: Path):
    run = tmp_path / "run"
    _apply(run, parse_sync(frames(b"W 3 pid\n101", b"A 0 2 stdout\na\n")))
    assert _local_offsets(run) == {"stdout": 2}
    # The next look asks from offset 2 and gets what follows.
    _apply(run, parse_sync(frames(b"W 3 pid\n101", b"A 2 2 stdout\nb\n")))
    assert (run / "stdout").read_bytes() == b"a\nb\n"
    _apply(run, parse_sync(frames(b"A 9 2 stdout\nz\n")))  # past our end: not ours to write
    assert (run / "stdout").read_bytes() == b"a\nb\n"
    _apply(run, parse_sync(frames(b"W 1 exit_code\n0", b"W 2 requests/r1\n{}")))
    assert (run / "exit_code").read_text() == "0" and (run / "requests/r1").read_text() == "{}"
    assert not (run / "pid").exists()  # gone there (a new attempt's reset): gone here
    _apply(run, parse_sync(frames(b"W 1 exit_code\n0")))
    assert not (run / "requests/r1").exists()
    _apply(run, parse_sync(frames(b"W 1 exit_code\n0", b"A 0 1 stdout\nc")))  # started again
    assert (run / "stdout").read_bytes() == b"c"


# --- the engine home, brought back with the workspace's last pass -----------------------------


def local_mirror(cls, remote: Path, local: Path, **options):
    return cls(
        LocalSandboxFiles(remote),
        local,
        remote_root=str(remote),
        scan_cache=str(remote.parent / f"{local.name}.scan"),
        helper=str(HELPER_SCRIPT),
        python=sys.executable,
        **options,
    )


def test_the_last_pass_brings_the_engine_home_back_with_the_workspace(tmp_path: Path):
    there_ws, there_home = tmp_path / "there-ws", tmp_path / "there-home"
    here_ws, here_home = tmp_path / "ws", tmp_path / "home"
    for folder in (there_ws, there_home, here_ws, here_home):
        folder.mkdir()
    (there_ws / "app.py").write_text("print(1)\n")
    transcript = there_home / ".claude" / "projects" / "-workspace" / "s1.jsonl"
    transcript.parent.mkdir(parents=True)
    transcript.write_text('{"type": "user"}\n')
    (here_home / "stale").write_text("only here\n")
    problems: list[str] = []
    home = local_mirror(WorkspaceMirror, there_home, here_home)
    mirror = local_mirror(
        RemoteWorkspaceMirror, there_ws, here_ws, home=home, on_problem=problems.append
    )
    mirror.sync()
    assert (here_ws / "app.py").read_text() == "print(1)\n"
    kept = here_home / ".claude" / "projects" / "-workspace" / "s1.jsonl"
    assert kept.read_text() == '{"type": "user"}\n'
    assert not (here_home / "stale").exists()  # the home here is the one there
    assert problems == []


def test_a_home_that_cannot_be_read_is_told_and_the_workspace_pass_stands(tmp_path: Path):
    there_ws, here_ws, here_home = tmp_path / "there-ws", tmp_path / "ws", tmp_path / "home"
    for folder in (there_ws, here_ws, here_home):
        folder.mkdir()
    (there_ws / "app.py").write_text("print(1)\n")
    problems: list[str] = []
    home = local_mirror(WorkspaceMirror, tmp_path / "no-such-home", here_home)
    mirror = local_mirror(
        RemoteWorkspaceMirror, there_ws, here_ws, home=home, on_problem=problems.append
    )
    assert mirror.sync() == ["app.py"]
    assert (here_ws / "app.py").exists()
    assert len(problems) == 1 and "engine home could not be brought back" in problems[0]


def send_home(
    here: Path, there: Path, names: list[str], kept: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """What RemoteLiveSession.send_home_files does, with the exec run here: the tar of this
    machine's files on the stdin of HOME_FILES_SCRIPT in the home `there`."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in [*names, *kept]:
            _add_local_file(tar, here, _home_name(name))
    return subprocess.run(
        ["sh", "-c", HOME_FILES_SCRIPT, "sh", str(there), str(len(names)), *names, *kept],
        input=data.getvalue(),
        capture_output=True,
        timeout=30,
    )


def test_the_launch_files_replace_theirs_there_and_leave_the_engines_files(tmp_path: Path):
    here, there, outside = tmp_path / "here", tmp_path / "there", tmp_path / "outside"
    (here / ".codex").mkdir(parents=True)
    (here / ".codex" / "config.toml").write_text("provider = 'cairn'\n")
    (here / ".codex" / "hooks.json").symlink_to(outside)  # a link here is not sent
    (there / ".codex" / "sessions").mkdir(parents=True)
    thread = there / ".codex" / "sessions" / "rollout-1.jsonl"
    thread.write_text("the engine's\n")
    outside.write_text("not Cairn's\n")
    # A link planted there in the config's place, and a gate left from an earlier launch.
    (there / ".codex" / "config.toml").symlink_to(outside)
    (there / ".codex" / "hooks.json").write_text("{}\n")
    names = [".codex/config.toml", ".codex/hooks.json"]
    done = send_home(here, there, names)
    assert done.returncode == 0, done.stderr
    config = there / ".codex" / "config.toml"
    assert not config.is_symlink() and config.read_text() == "provider = 'cairn'\n"
    assert outside.read_text() == "not Cairn's\n"  # replaced, not written through
    assert not (there / ".codex" / "hooks.json").exists()  # not here: removed there
    assert thread.read_text() == "the engine's\n"
    # A new home there (no .codex yet) gets its folders; the file keeps its mode.
    (here / ".codex" / "config.toml").chmod(0o600)
    (tmp_path / "new").mkdir()
    assert send_home(here, tmp_path / "new", names).returncode == 0
    made = tmp_path / "new" / ".codex" / "config.toml"
    assert made.read_text() == "provider = 'cairn'\n" and made.stat().st_mode & 0o777 == 0o600
    # A conversation put back here from a checkpoint goes only where there is none there: the
    # engine's own copy there is newer.
    (here / ".codex" / "sessions").mkdir()
    for name in ("rollout-1.jsonl", "rollout-2.jsonl"):
        (here / ".codex" / "sessions" / name).write_text("the checkpoint's\n")
    kept = (".codex/sessions/rollout-1.jsonl", ".codex/sessions/rollout-2.jsonl")
    assert send_home(here, there, names, kept).returncode == 0
    assert thread.read_text() == "the engine's\n"
    assert (there / ".codex" / "sessions" / "rollout-2.jsonl").read_text() == "the checkpoint's\n"
    # What cannot be replaced there fails, with tar's or rm's words.
    (there / ".codex" / "hooks.json").mkdir()
    failed = send_home(here, there, names)
    assert failed.returncode != 0 and b"hooks.json" in failed.stderr


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", ".codex/../../x", "", "."])
def test_a_home_file_outside_the_home_is_refused(name: str):
    with pytest.raises(ValueError, match="not a path inside the engine home"):
        _home_name(name)
