"""The workspace mirror against a real hardened sandbox whose workspace is a Docker volume (no bind
mount at all): the helper runs inside as the sandbox user, the protocol goes through docker-py
exec streams, and files written in the container appear in the local folder."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from core.sandbox.base import default_sandbox_user
from core.sandbox.mirror import (
    HELPER_IN_SANDBOX,
    HELPER_SCRIPT,
    TAR_READ_ARGV,
    WorkspaceMirror,
)
from core.sandbox.remote import read_entries
from tests.support import folder_tree as local_tree
from tests.support import wait_for

WORKSPACE, STATE, TOOLS = "/workspace", "/cairn/state", "/cairn/tools"


class ExecLines:
    """One exec's stdout as lines, its stdin held open until close()."""

    def __init__(self, api, container: str, argv: Sequence[str]) -> None:
        from docker.utils.socket import frames_iter

        made = api.exec_create(container, list(argv), stdin=True, stdout=True, stderr=True)
        self.exec_id = made["Id"]
        self._sock = api.exec_start(self.exec_id, socket=True)
        self._raw = self._sock._sock
        self._frames = frames_iter(self._sock, tty=False)
        self.stderr = b""

    def __iter__(self) -> Iterator[str]:
        pending = b""
        for stream, data in self._frames:
            if stream != 1:
                self.stderr += data
                continue
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                yield line.decode("utf-8", "surrogateescape")

    def close(self) -> None:
        # shutdown acts at once; close() alone waits for the reader's file object to let go.
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)


class DockerFiles:
    """The mirror's protocol through docker-py exec streams."""

    def __init__(self, api, container: str) -> None:
        self.api = api
        self.container = container
        self.read_calls: list[list[str]] = []

    def lines(self, argv: Sequence[str]) -> ExecLines:
        return ExecLines(self.api, self.container, argv)

    def read_files(self, paths: Sequence[str]):
        self.read_calls.append(list(paths))
        made = self.api.exec_create(
            self.container,
            list(TAR_READ_ARGV),
            stdin=True,
            stdout=True,
            stderr=True,
            workdir=WORKSPACE,
        )
        yield from read_entries(self.api.exec_start(made["Id"], socket=True), paths)


@pytest.fixture
def sandbox(docker_client, sandbox_image):
    """A hardened container whose workspace, state and tools folders are Docker volumes."""
    import docker.types

    api = docker_client.api
    tag = f"cairn-test-mirror-{uuid.uuid4().hex[:10]}"
    uid, gid = default_sandbox_user()
    names = {WORKSPACE: f"{tag}-ws", STATE: f"{tag}-state", TOOLS: f"{tag}-tools"}
    made: list[str] = []
    try:
        for name in names.values():
            docker_client.volumes.create(name, labels={"cairn-test": "mirror"})
        docker_client.containers.run(
            sandbox_image,
            ["chown", f"{uid}:{gid}", *names],
            remove=True,
            network_mode="none",
            volumes={name: {"bind": target, "mode": "rw"} for target, name in names.items()},
        )
        host_config = api.create_host_config(
            mounts=[
                # no_copy: an empty volume over the image's root-owned folder would take that
                # folder's owner again at every start.
                docker.types.Mount(target, name, type="volume", no_copy=True)
                for target, name in names.items()
            ],
            tmpfs={"/tmp": "rw,nosuid,nodev,size=16m"},
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            network_mode="none",
            init=True,
        )
        container = api.create_container(
            sandbox_image,
            command=["sleep", "infinity"],
            user=f"{uid}:{gid}",
            working_dir=WORKSPACE,
            name=tag,
            host_config=host_config,
            labels={"cairn-test": "mirror"},
        )["Id"]
        made.append(container)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            data = HELPER_SCRIPT.read_bytes()
            info = tarfile.TarInfo(os.path.basename(HELPER_IN_SANDBOX))
            info.size, info.mode, info.uid, info.gid = len(data), 0o644, uid, gid
            tar.addfile(info, io.BytesIO(data))
        assert api.put_archive(container, TOOLS, archive.getvalue())
        api.start(container)
        yield api, container
    finally:
        for container in made:
            with contextlib.suppress(Exception):
                api.remove_container(container, force=True)
        for name in names.values():
            with contextlib.suppress(Exception):
                docker_client.volumes.get(name).remove(force=True)


def run_in(api, container: str, script: str) -> str:
    made = api.exec_create(container, ["sh", "-c", script], workdir=WORKSPACE)
    out = api.exec_start(made["Id"]).decode()
    assert api.exec_inspect(made["Id"])["ExitCode"] == 0, out
    return out


@contextlib.contextmanager
def following(files, local: Path, changed: list, problems: list) -> Iterator[WorkspaceMirror]:
    """A mirror following the sandbox, its first full pass done; stopped afterwards."""
    mirror = WorkspaceMirror(
        files,
        local,
        scan_cache=f"{STATE}/workspace-scan",
        exclude=[".git"],
        on_changed=changed.append,
        on_problem=problems.append,
    )
    mirror.start()
    try:
        assert mirror.wait_ready(30), problems
        yield mirror
    finally:
        mirror.stop()


def test_files_written_in_a_remote_style_sandbox_appear_locally(sandbox, tmp_path):
    api, container = sandbox
    info = api.inspect_container(container)
    assert info["HostConfig"]["ReadonlyRootfs"] is True
    assert info["HostConfig"]["CapDrop"] == ["ALL"]
    assert info["HostConfig"]["NetworkMode"] == "none"
    assert {m["Type"] for m in info["Mounts"]} <= {"volume", "tmpfs"}
    assert not [m for m in info["Mounts"] if m["Type"] == "bind"]

    run_in(api, container, "echo seeded > seed.txt && mkdir -p .git && echo ref > .git/HEAD")
    local = tmp_path / "local"
    files = DockerFiles(api, container)
    changed: list[list[str]] = []
    problems: list[str] = []
    with following(files, local, changed, problems):
        assert (local / "seed.txt").read_text() == "seeded\n"
        assert not (local / ".git").exists()

        run_in(
            api,
            container,
            "mkdir -p src/pkg && printf 'print(1)\\n' > src/pkg/app.py"
            " && printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh && ln -s src/pkg pkg",
        )
        wanted = {
            "seed.txt": ("file", b"seeded\n", False),
            "src": ("dir",),
            "src/pkg": ("dir",),
            "src/pkg/app.py": ("file", b"print(1)\n", False),
            "run.sh": ("file", b"#!/bin/sh\n", True),
            "pkg": ("link", "src/pkg"),
        }
        wait_for(lambda: local_tree(local) == wanted, timeout=20, what="the first files")

        run_in(api, container, "mv src lib && rm seed.txt && echo two >> run.sh")
        wanted = {
            "lib": ("dir",),
            "lib/pkg": ("dir",),
            "lib/pkg/app.py": ("file", b"print(1)\n", False),
            "run.sh": ("file", b"#!/bin/sh\ntwo\n", True),
            "pkg": ("link", "src/pkg"),
        }
        wait_for(lambda: local_tree(local) == wanted, timeout=20, what="the rename")
        assert problems == []
        assert any("lib/pkg/app.py" in c for c in changed)

        # The helper runs as the sandbox user, and ends with its connection.
        ps = run_in(api, container, "ps -o user:12,args -e")
        assert any("workspace-watch.py watch" in line for line in ps.splitlines())
    wait_for(
        lambda: "workspace-watch.py watch" not in run_in(api, container, "ps -o args -e"),
        timeout=10,
        what="the helper to end with its connection",
    )

    # Changes made while nobody watched: a new mirror's first pass reads only those.
    run_in(api, container, "echo three > lib/new.txt && rm run.sh && echo 4 > lib/pkg/app.py")
    again = DockerFiles(api, container)
    with following(again, local, changed, problems) as mirror:
        assert local_tree(local) == {
            "lib": ("dir",),
            "lib/pkg": ("dir",),
            "lib/pkg/app.py": ("file", b"4\n", False),
            "lib/new.txt": ("file", b"three\n", False),
            "pkg": ("link", "src/pkg"),
        }
        assert sorted(p for call in again.read_calls for p in call) == [
            "lib/new.txt",
            "lib/pkg/app.py",
        ]
        # The scan's stat cache (in its own volume): once past their racy window, unchanged
        # files are not hashed again.
        assert mirror.stats["remote_files"] == 3
        time.sleep(0.2)
        mirror.sync()
        mirror.sync()
        assert mirror.stats["remote_files"] == 3 and mirror.stats["remote_hashed"] == 0
