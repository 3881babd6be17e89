"""The SSH "remote host" the remote-sandbox tests use (scripts/remote-host.sh: a second Docker
engine and an SSH server on 127.0.0.1 whose user's sessions use it): its settings, started here
when scripts/setup.sh did not, or a skip that says why it is not there."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = (
    "CAIRN_TEST_SSH_HOST",
    "CAIRN_TEST_SSH_KEY",
    "CAIRN_TEST_SSH_KNOWN_HOSTS",
    "CAIRN_TEST_REMOTE_SOCKET",
)


def remote_settings() -> dict[str, str]:
    """The remote host's settings (CAIRN_TEST_SSH_HOST, …), starting it when needed."""
    if all(os.environ.get(n) for n in NAMES):
        return {n: os.environ[n] for n in NAMES}
    if os.geteuid() != 0 or shutil.which("dockerd") is None or not Path("/usr/sbin/sshd").exists():
        pytest.skip("the SSH remote host needs root, dockerd and sshd (scripts/remote-host.sh)")
    # Not started by scripts/setup.sh: start it here (idempotent).
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/remote-host.sh"), "start"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.skip(f"the SSH remote host did not start: {done.stderr.strip()[-300:]}")
    return dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)


def private_key_copy(settings: dict[str, str], folder: Path) -> Path:
    """The test key as a user keeps it: readable by its owner only (ssh refuses it otherwise)."""
    key = folder / "id_ed25519"
    shutil.copy(settings["CAIRN_TEST_SSH_KEY"], key)
    key.chmod(0o600)
    return key
