"""Record what the real Codex CLI prints (`codex exec --json`) into samples/codex-exec.jsonl.

The unit tests parse these lines; run this again after changing the pinned version:
    .venv/bin/python -m tests.agents.record_codex_samples
It drives the installed binary on this machine against the scripted server, with Cairn's own
config.toml and hooks.json (a gate that allows everything), through a command, a patch, a
message, a resumed turn and a turn the server refuses.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from core.engines.base import MODE_CONTINUE, MODE_START, EngineSettings, LaunchContext
from core.engines.codex import CodexEngine
from tests.agents.codex_host import exec_on_host
from tests.agents.fake_openai import FakeOpenAI, fail, patch, run, say
from tests.agents.locate import codex_binary, missing

SAMPLES = Path(__file__).resolve().parent / "samples" / "codex-exec.jsonl"


def main() -> int:
    binary = codex_binary()
    if binary is None:
        print(missing("Codex"), file=sys.stderr)
        return 1
    # Not under /tmp: Codex refuses to make its helper links in a temporary folder.
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        root = Path(tmp)
        (root / "workspace").mkdir()
        gate = root / "gate.sh"
        gate.write_text("#!/bin/sh\ncat > /dev/null\nexit 0\n")
        gate.chmod(0o755)
        script = [
            run("echo hello > hello.txt && cat hello.txt"),
            patch("*** Begin Patch\n*** Add File: notes.md\n+# Notes\n*** End Patch\n"),
            run("exit 3"),
            say("I wrote hello.txt and notes.md."),
            say("Still here."),
            fail(400, "The model `gpt-5.5` does not exist."),
        ]
        lines: list[str] = []
        with FakeOpenAI(script) as server:
            settings = EngineSettings(binary=str(binary), base_url=server.url)
            engine = CodexEngine()

            def ctx(mode: str, prompt: str, session_id: str | None = None) -> LaunchContext:
                return LaunchContext(
                    run_id="run",
                    mode=mode,
                    prompt=prompt,
                    spec={},
                    settings=settings,
                    host_run_dir=root / "run",
                    sandbox_run_dir=str(root / "run"),
                    host_home=root / "home",
                    sandbox_home=str(root / "home"),
                    workspace=str(root / "workspace"),
                    session_id=session_id,
                    gate=[str(gate)],
                )

            first = ctx(MODE_START, "Write hello.txt and notes.md.")
            engine.prepare(first)
            done = exec_on_host(engine, first, binary)
            lines += done.stdout.splitlines()
            thread_id = json.loads(lines[0])["thread_id"]
            again = ctx(MODE_CONTINUE, "Are you there?", thread_id)
            lines += exec_on_host(engine, again, binary).stdout.splitlines()
            refused = exec_on_host(engine, ctx(MODE_CONTINUE, "And now?", thread_id), binary)
            lines += refused.stdout.splitlines()
    SAMPLES.parent.mkdir(exist_ok=True)
    SAMPLES.write_text("".join(line + "\n" for line in lines))
    print(f"{len(lines)} lines → {SAMPLES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
