"""A Docker engine on another machine, reached over SSH: the bridge carries the Docker API over the
system's ssh client to a second engine (scripts/remote-host.sh: a second dockerd and an SSH
server on 127.0.0.1), and every way of failing to get there ends in a sentence that says what to
do."""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest

from core.errors import InputError
from core.sandbox.ssh_bridge import SshBridge, SshTarget, SshUnavailable
from tests.integration.remote_support import private_key_copy, remote_settings

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    settings = remote_settings()
    settings["key"] = str(private_key_copy(settings, tmp_path_factory.mktemp("ssh")))
    return settings


@pytest.fixture
def bridge(remote):
    with SshBridge(
        SshTarget.parse(remote["CAIRN_TEST_SSH_HOST"]),
        key_file=Path(remote["key"]),
        known_hosts=Path(remote["CAIRN_TEST_SSH_KNOWN_HOSTS"]),
    ) as made:
        yield made


def test_the_remote_engine_answers_through_the_bridge(bridge, remote):
    assert bridge.check()  # its API version
    client = docker.DockerClient(base_url=bridge.url, timeout=60)
    try:
        info = client.info()
    finally:
        client.close()
    direct = docker.DockerClient(base_url=f"unix://{remote['CAIRN_TEST_REMOTE_SOCKET']}")
    try:
        assert info["DockerRootDir"] == direct.info()["DockerRootDir"]
    finally:
        direct.close()
    assert info["DockerRootDir"] != docker.from_env().info()["DockerRootDir"]


def test_an_image_sent_over_ssh_runs_a_container_there_and_not_here(bridge, remote):
    local = docker.from_env()
    client = docker.DockerClient(base_url=bridge.url, timeout=120)
    name = f"cairn-test-ssh-{uuid.uuid4().hex[:10]}"
    try:
        image = local.images.get("cairn-test-busybox:1")
        client.images.load(b"".join(image.save(named=True)))  # docker save | load, over SSH
        out = client.containers.run(
            "cairn-test-busybox:1",
            ["sh", "-c", "echo from-$(hostname)"],
            name=name,
            hostname="far",
            network_mode="none",
            remove=True,
        )
        assert out.strip() == b"from-far"
        assert not local.containers.list(all=True, filters={"name": name})
    finally:
        for c in client.containers.list(all=True, filters={"name": name}):
            c.remove(force=True)
        client.close()
        local.close()


def test_many_api_calls_share_one_connection(bridge):
    client = docker.DockerClient(base_url=bridge.url, timeout=60)
    try:
        client.ping()  # the shared connection is made here
        started = time.monotonic()
        for _ in range(20):
            client.version()
        assert time.monotonic() - started < 20
    finally:
        client.close()
    master = Path(bridge.url[len("unix://") :]).parent / "master"
    assert master.exists()


def test_an_unknown_host_key_is_refused_with_what_to_do(remote, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    made = SshBridge(
        SshTarget.parse(remote["CAIRN_TEST_SSH_HOST"]),
        key_file=Path(remote["key"]),
        known_hosts=empty,
    )
    with pytest.raises(SshUnavailable, match="host key of .* is not in .*known_hosts"):
        made.check()


def test_a_changed_host_key_is_refused(remote, tmp_path):
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    target = SshTarget.parse(remote["CAIRN_TEST_SSH_HOST"])
    wrong = tmp_path / "known_hosts"
    key = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    wrong.write_text(f"[{target.host}]:{target.port} {key}\n")
    made = SshBridge(target, key_file=Path(remote["key"]), known_hosts=wrong)
    with pytest.raises(SshUnavailable, match="has changed"):
        made.check()


def test_a_key_the_server_does_not_know_is_refused(remote, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    made = SshBridge(
        SshTarget.parse(remote["CAIRN_TEST_SSH_HOST"]),
        key_file=stranger,
        known_hosts=Path(remote["CAIRN_TEST_SSH_KNOWN_HOSTS"]),
    )
    with pytest.raises(SshUnavailable, match="refused the SSH key"):
        made.check()


def test_a_host_nobody_listens_on_cannot_be_reached(remote, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    made = SshBridge(
        SshTarget.parse(f"ssh://cairn-remote@127.0.0.1:{port}"),
        key_file=Path(remote["key"]),
        known_hosts=Path(remote["CAIRN_TEST_SSH_KNOWN_HOSTS"]),
        connect_timeout=5,
    )
    started = time.monotonic()
    with pytest.raises(SshUnavailable, match="cannot be reached"):
        made.check()
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "url",
    [
        "ssh://-oProxyCommand=touch /tmp/x",
        "ssh://user@host:99999",
        "ssh://us er@host",
        "tcp://host:2375",
        "ssh://",
    ],
)
def test_an_address_that_is_not_one_is_refused_before_ssh_runs(url):
    with pytest.raises(InputError):
        SshTarget.parse(url)


def test_addresses_parse():
    assert SshTarget.parse("ssh://ann@build.example:2200") == SshTarget(
        "build.example", "ann", 2200
    )
    assert SshTarget.parse("ssh://box").destination == "box"
    assert SshTarget.parse("ssh://[::1]:22").destination == "::1"
