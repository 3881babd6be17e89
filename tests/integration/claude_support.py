"""What the integration tests that drive the real Claude Code CLI through `cairnctl` share: the
CLI's binary (or a skip), the engine settings pointing at the scripted server with a keyring
secret, and the clean-up of a data folder's containers, proxies and judge (with its secret, or
without one for a test that signs in and out itself)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.approvals import stop_judge
from core.sandbox import egress
from tests.agents.locate import claude_binary, missing
from tests.support import cairnctl

API_KEY = "sk-ant-test-not-a-real-key"


@pytest.fixture(scope="module")
def binary() -> Path:
    found = claude_binary()
    if found is None:
        pytest.skip(missing())
    return found


def use_scripted_server(data: Path, binary: Path, url: str, secret: str) -> None:
    """Claude Code settings for the data folder, and the secret its proxy adds to requests."""
    (data / "settings.json").write_text(
        json.dumps(
            {
                "engines": {
                    "claude-code": {
                        "binary": str(binary),
                        "base_url": url,
                        "api_key_secret": secret,
                    }
                }
            }
        )
    )
    cairnctl(data, "secret", "set", secret, input=API_KEY)


def release(data: Path, secret: str, docker_client) -> None:
    """The secret, the data folder's containers, egress proxies and judge: gone."""
    cairnctl(data, "secret", "rm", secret, check=False)
    clean_up(data, docker_client)


def clean_up(data: Path, docker_client) -> None:
    """The data folder's containers, egress proxies and judge: gone."""
    label = f"cairn.data_dir={data.resolve()}"
    for c in docker_client.containers.list(all=True, filters={"label": label}):
        c.remove(force=True)
    for sock in (data / "egress").glob("*/sandbox/egress.sock"):
        egress.stop(sock)
    stop_judge(data.resolve())
