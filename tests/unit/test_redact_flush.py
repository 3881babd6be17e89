"""The in-sandbox output filter (resources/sandbox/redact-output.py) run as a process: secrets are
hidden in every case, and nothing the command printed is held back beyond an unfinished secret on
an unfinished line — not while it runs, not when it exits, not when the filter is signalled."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core import sandboxes

FILTER = sandboxes.RESOURCES_SANDBOX / "redact-output.py"
SECRET = "tok-9f8e7d6c5b4a39281706f5e4d3c2b1a0"  # longer than any line printed below
MARK = b"[secret:API_KEY]"


def start(tmp_path: Path, script: str, **env: str) -> tuple[subprocess.Popen, Path, Path]:
    """The filter running `sh -c script`, its stdout and stderr going to files (as in a run)."""
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(
            [sys.executable, str(FILTER), "--", "sh", "-c", script],
            stdout=o,
            stderr=e,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            start_new_session=True,  # its own process group, to end everything it started
            env={
                "PATH": os.environ["PATH"],
                "API_KEY": SECRET,
                "CAIRN_REDACT_VARS": "API_KEY",
                **env,
            },
        )
    return proc, out, err


def wait_for(path: Path, expected: bytes, timeout: float = 10.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        data = path.read_bytes()
        if data == expected or time.monotonic() > deadline:
            return data
        time.sleep(0.02)


def end(proc: subprocess.Popen) -> None:
    """Kill the filter and whatever it started, as a container going away would."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run(tmp_path: Path, script: str, **env: str) -> tuple[int, bytes, bytes]:
    proc, out, err = start(tmp_path, script, **env)
    code = proc.wait(timeout=30)
    return code, out.read_bytes(), err.read_bytes()


def test_a_line_is_written_while_the_command_still_runs(tmp_path):
    proc, out, _ = start(tmp_path, "echo first line; sleep 30")
    try:
        assert wait_for(out, b"first line\n") == b"first line\n"
    finally:
        end(proc)


def test_an_unfinished_line_that_cannot_start_a_secret_is_written_at_once(tmp_path):
    proc, out, _ = start(tmp_path, "printf 'progress 42%%'; sleep 30")
    try:
        assert wait_for(out, b"progress 42%") == b"progress 42%"
    finally:
        end(proc)


def test_a_line_survives_the_filter_being_killed_outright(tmp_path):
    proc, out, _ = start(tmp_path, "echo the last words; sleep 30")
    assert wait_for(out, b"the last words\n") == b"the last words\n"
    end(proc)  # SIGKILL to all of it: nothing can be written from here on
    assert out.read_bytes() == b"the last words\n"


def test_a_secret_split_across_two_writes_is_hidden(tmp_path):
    head, tail = SECRET[:10], SECRET[10:]
    proc, out, _ = start(
        tmp_path,
        f"printf 'key={head}'; while [ ! -e go ]; do sleep 0.02; done; printf '{tail} done\\n'",
    )
    try:
        # While the second half has not come, only the possible start of the secret is held.
        assert wait_for(out, b"key=") == b"key="
        time.sleep(0.2)
        assert out.read_bytes() == b"key="
        (tmp_path / "go").touch()
        assert proc.wait(timeout=30) == 0
    finally:
        end(proc)
    assert out.read_bytes() == b"key=" + MARK + b" done\n"


def test_a_secret_written_a_byte_at_a_time_is_hidden_on_both_streams(tmp_path):
    script = (
        'for c in $(printf "%s" "$API_KEY" | sed "s/./& /g"); do '
        'printf "%s" "$c"; printf "%s" "$c" >&2; sleep 0.01; done; echo; echo >&2'
    )
    code, out, err = run(tmp_path, script)
    assert code == 0
    assert out == MARK + b"\n"
    assert err == MARK + b"\n"


def test_the_encoded_forms_are_hidden(tmp_path):
    code, out, _ = run(
        tmp_path,
        'printf "%s" "$API_KEY" | base64 -w0; echo; printf "a=%s&b\\n" "$API_KEY"',
    )
    assert code == 0
    assert out == MARK + b"\na=" + MARK + b"&b\n"
    assert base64.b64encode(SECRET.encode()) not in out


def test_a_secret_with_line_ends_is_hidden_line_by_line(tmp_path):
    pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu\n-----END KEY-----"
    code, out, _ = run(
        tmp_path,
        'printf "%s\\n" "$API_KEY"; printf "%s" "$API_KEY" | head -n 2',
        API_KEY=pem,
    )
    assert code == 0
    assert out == (MARK + b"\n") * 5
    assert b"MIIBOgIB" not in out


def test_the_output_ends_exactly_where_the_commands_output_ended(tmp_path):
    # The unfinished start of the secret is all the command printed last: it is written at exit.
    code, out, err = run(tmp_path, f"echo line; printf 'almost {SECRET[:8]}'; printf 'e' >&2")
    assert code == 0
    assert out == f"line\nalmost {SECRET[:8]}".encode()
    assert err == b"e"


def test_what_is_held_is_written_when_the_command_exits_though_its_children_keep_the_pipe(
    tmp_path,
):
    proc, out, _ = start(tmp_path, f"(sleep 5) & printf 'end {SECRET[:6]}'; exit 5")
    try:
        expected = f"end {SECRET[:6]}".encode()
        assert wait_for(out, expected, timeout=4) == expected
        assert proc.poll() is None  # still waiting for the child's child to let go of the pipe
        assert proc.wait(timeout=30) == 5
    finally:
        end(proc)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_filter_reaches_the_command_and_all_its_output_is_kept(tmp_path, sig):
    script = (
        f'trap \'printf "bye {SECRET[:5]}"; printf "{SECRET[5:]}\\n"; exit 7\' {sig.name[3:]}; '
        f"printf 'working {SECRET[:4]}'; while :; do sleep 0.05; done"
    )
    proc, out, _ = start(tmp_path, script)
    try:
        assert wait_for(out, b"working ") == b"working "
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 7
        # The held start of a secret was not written before the command finished the secret.
        assert out.read_bytes() == b"working " + SECRET[:4].encode() + b"bye " + MARK + b"\n"
    finally:
        end(proc)


def test_a_command_killed_by_a_signal_gives_128_plus_its_number(tmp_path):
    code, out, _ = run(tmp_path, "echo before; kill -KILL $$")
    assert code == 128 + signal.SIGKILL
    assert out == b"before\n"


def test_output_without_secrets_passes_byte_for_byte(tmp_path):
    data = os.urandom(300_000) + b"\nno newline at the end"
    (tmp_path / "blob").write_bytes(data)
    code, out, _ = run(tmp_path, f"cat '{tmp_path / 'blob'}'")
    assert code == 0
    assert SECRET.encode() not in data
    assert out == data


def test_short_values_and_missing_variables_are_not_hidden(tmp_path):
    code, out, _ = run(
        tmp_path, "echo abc; echo $API_KEY", API_KEY="abc", CAIRN_REDACT_VARS="API_KEY,NOPE"
    )
    assert code == 0
    assert out == b"abc\nabc\n"


def test_the_list_of_names_does_not_reach_the_command(tmp_path):
    code, out, _ = run(tmp_path, 'echo "[${CAIRN_REDACT_VARS:-}]"')
    assert code == 0
    assert out == b"[]\n"


def test_a_command_that_cannot_start_is_reported(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(FILTER), "--", str(tmp_path / "missing")],
        capture_output=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert proc.returncode == 127
    assert b"cannot run" in proc.stderr
