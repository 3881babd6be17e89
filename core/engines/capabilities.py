"""What an engine's program can do, judged from the program itself: the flags and subcommands
the engine uses, looked up in the program's own help output on the host.

Owns the feature declarations' shape (`Feature` and the helpers that make them), running a
binary's `--version` and help commands with a short timeout (in parallel, with a private HOME so
nothing of the person's is read or written), judging the output, and a cache keyed by the file's
path, size and modification time. Which features an engine needs is the engine's business; where
the binary is found belongs to `core.engines.discovery`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# Every probe command of one binary runs at once; each gets this long. A native CLI answers its
# help in a tenth of a second once its file is in the page cache.
PROBE_TIMEOUT_S = 1.5
# A command that did not answer in time is asked once more, given this long: a first start from a
# cold disk, or on a machine busy with builds, can take seconds, and is not a broken program.
PROBE_PATIENCE_S = 15.0
HELP = ("--help",)
VERSION = ("--version",)
# Variables that keep the CLIs from reaching out or updating themselves while they are probed.
QUIET_ENV = {
    "NO_COLOR": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}
_VERSION_RE = re.compile(r"\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?")


@dataclass(frozen=True)
class Feature:
    """One thing an engine relies on, and how to see it: `pattern` must match the output
    (stdout and stderr together) of the binary run with `args`."""

    name: str  # for people: "--resume-session-at", "exec resume", "--output-format stream-json"
    args: tuple[str, ...]
    pattern: str

    def present(self, output: str) -> bool:
        return re.search(self.pattern, output, re.MULTILINE) is not None


def _flag_re(name: str) -> str:
    return rf"(?<![\w-]){re.escape(name)}(?![\w-])"


def flag(name: str, *, args: Sequence[str] = HELP) -> Feature:
    """A flag listed in the help of `args` (the top-level help unless told)."""
    return Feature(name, tuple(args), _flag_re(name))


def choice(name: str, value: str, *, args: Sequence[str] = HELP) -> Feature:
    """A flag whose help text names `value` among its choices."""
    return Feature(
        f"{name} {value}", tuple(args), _flag_re(name) + r"[\s\S]{0,600}?" + _flag_re(value)
    )


def subcommand(path: Sequence[str]) -> Feature:
    """A subcommand (`exec`, or `exec resume`) listed in its parent command's help."""
    *parent, name = path
    return Feature(" ".join(path), (*parent, "--help"), rf"^\s+{re.escape(name)}\b")


def hidden_flag(name: str) -> Feature:
    """A flag that takes a value but is left out of the help: given without its value, a CLI
    that knows it says the argument is missing (commander's wording), one that does not calls
    it unknown. The probe ends at that error, before the CLI does anything."""
    return Feature(name, (name,), rf"option '{re.escape(name)}\b[^']*' argument missing")


@dataclass(frozen=True)
class Probe:
    """What running a binary on the host showed."""

    binary: Path
    version: str | None  # as the binary reports it ("2.1.332"), None when it said none
    missing: tuple[str, ...] = ()  # names of the features it lacks
    error: str | None = None  # why it could not be run at all (then `missing` means nothing)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.missing


def parse_version(text: str) -> str | None:
    match = _VERSION_RE.search(text or "")
    return match.group(0) if match else None


def version_tuple(version: str | None) -> tuple[int, ...]:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return tuple(int(p) for p in match.groups()) if match else (0, 0, 0)


def _run(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> tuple[int | None, str]:
    """Exit code (None on timeout) and stdout+stderr of one probe command. A command that runs
    too long is killed with everything it started."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return -1, exc.strerror or str(exc)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, ""
    return proc.returncode, out.decode("utf-8", "replace")


def run_all(
    binary: Path, commands: Iterable[tuple[str, ...]], *, timeout: float = PROBE_TIMEOUT_S
) -> dict[tuple[str, ...], tuple[int | None, str]]:
    """Each command's (exit code, output), run at once in an empty throw-away HOME."""
    unique = list(dict.fromkeys(commands))
    with tempfile.TemporaryDirectory(prefix="cairn-probe-") as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "CODEX_HOME": home,
            "TMPDIR": home,
            "LANG": "C.UTF-8",
            **QUIET_ENV,
        }
        with ThreadPoolExecutor(max_workers=max(1, len(unique))) as pool:
            futures = {
                args: pool.submit(_run, [str(binary), *args], env, timeout) for args in unique
            }
            return {args: future.result() for args, future in futures.items()}


_cache: dict[tuple[str, int, int, tuple[Feature, ...]], Probe] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def probe(
    binary: Path,
    features: Sequence[Feature],
    *,
    version_args: Sequence[str] = VERSION,
    timeout: float = PROBE_TIMEOUT_S,
    patience: float = PROBE_PATIENCE_S,
) -> Probe:
    """Run `binary` for its version and every feature's help, and say what it lacks. A command
    that takes longer than `timeout` is run once more with `patience`, so only a program that
    hangs is judged unusable. Cached by the file's path, size and modification time: a binary
    replaced in place is probed again."""
    binary = Path(binary)
    try:
        st = binary.stat()
    except OSError as exc:
        return Probe(binary, None, error=f"{binary} cannot be read ({exc.strerror or exc})")
    key = (str(binary), st.st_size, st.st_mtime_ns, tuple(features))
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    version_key = tuple(version_args)
    outputs = run_all(binary, [version_key, *(f.args for f in features)], timeout=timeout)
    slow = [args for args, (code, _) in outputs.items() if code is None]
    if slow:
        timeout = max(timeout, patience)
        outputs.update(run_all(binary, slow, timeout=timeout))
    code, text = outputs[version_key]
    if code is None:
        return Probe(binary, None, error=f"{binary} did not answer --version within {timeout:g} s")
    if code != 0:
        said = text.strip().splitlines()[-1:] or [f"exit {code}"]
        return Probe(binary, None, error=f"{binary} could not run ({said[0][:200]})")
    timed_out = sorted({" ".join(f.args) for f in features if outputs[f.args][0] is None})
    if timed_out:
        # Not cached: a slow first start (a cold disk) should not be remembered as a failure.
        return Probe(
            binary,
            parse_version(text),
            error=f"{binary} did not answer `{timed_out[0]}` within {timeout:g} s",
        )
    missing = tuple(f.name for f in features if not f.present(outputs[f.args][1]))
    result = Probe(binary, parse_version(text), missing)
    with _cache_lock:
        _cache[key] = result
    return result
