"""Record what the real Claude Code CLI prints (stream-json) into samples/claude-stream.jsonl.

The unit tests parse these lines; run this again after changing the pinned version:
    .venv/bin/python -m tests.agents.record_claude_samples
It needs Docker and the sandbox image: each attempt runs the way a run does, in a Cairn sandbox
under `allowlist` with a stand-in gate, through five attempts — a start (Bash, Write, a refused
Bash), a continue, a fork, a continue of a session that does not exist, and a start whose gate
does not answer in time.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

from core.engines import claude_code
from core.engines.base import MODE_CONTINUE, MODE_FORK, MODE_START
from tests.agents.fake_anthropic import Bash, FakeAnthropic, Reply, Tool
from tests.agents.locate import claude_binary, missing

SAMPLES = Path(__file__).resolve().parent / "samples" / "claude-stream.jsonl"
IMAGE = "cairn-sandbox:1"

# Refuses commands mentioning "forbidden"; answers too late for ones mentioning "slow".
GATE = """#!/bin/sh
in=$(cat)
case "$in" in
  *forbidden*) echo "refused by the test gate" >&2; exit 2 ;;
  *slow*) sleep 5; exit 0 ;;
esac
exit 0
"""


def main() -> int:
    import docker

    from tests.integration.test_claude_code_cli import Sandboxed

    binary = claude_binary()
    if binary is None:
        print(missing(), file=sys.stderr)
        return 1
    client = docker.from_env()
    streams = []
    script = [
        Bash("echo hello > hello.txt", text="Writing the file."),
        Tool("Write", {"file_path": "/workspace/notes.txt", "content": "notes\n"}),
        Bash("touch forbidden.txt"),
        Reply("Made hello.txt and notes.txt; the other command was refused."),
    ]
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic(script) as server:
        box = Sandboxed(Path(tmp), binary, server, IMAGE)
        try:
            (box.gate_calls.parent / "gate.sh").write_text(GATE)

            def attempt(mode, prompt, session_id=None, expect=0):
                ctx, code, stdout, stderr = box.launch(mode, prompt, session_id)
                if code != expect:
                    raise SystemExit(f"{mode} ended with {code}, not {expect}: {stderr[-2000:]}")
                streams.append(stdout)
                return ctx

            first = box.engine.session_id_for(attempt(MODE_START, "make hello.txt and notes.txt"))
            server.add(Reply("Second turn, same session."))
            attempt(MODE_CONTINUE, "now say more", first)
            server.add(Reply("A forked turn."))
            attempt(MODE_FORK, "try another way", first)
            attempt(MODE_CONTINUE, "resume what is not there", str(uuid.uuid4()), expect=1)
            claude_code.HOOK_TIMEOUT_S = 2  # shorter than the gate's answer to "slow"
            server.add(Bash("slow command"), Reply("The slow command was refused."))
            attempt(MODE_START, "run the slow command")
        finally:
            box.close(client)
    SAMPLES.write_text("".join(streams))
    print(f"wrote {sum(s.count(chr(10)) for s in streams)} lines to {SAMPLES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
