"""Where Cairn's own files are and how it starts its own Python processes, the same way from a
source checkout and from the frozen (PyInstaller) bundle.

Owns the resources folder lookup, the command line of the helper processes (the approvals
judge, the egress proxy) and running Cairn's own JSON commands in a child; what those processes
do belongs to their modules.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import time
from collections.abc import Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import CairnError

# A frozen app has no interpreter to give `-m`: its executables take this switch instead.
MODULE_SWITCH = "--cairn-module"
# The bundle's bootloader puts its own folder first on the library path, keeping the user's here.
SAVED_LIBRARY_PATH = "LD_LIBRARY_PATH_ORIG"


def _bundle_dir() -> str | None:
    """The folder PyInstaller's bootloader unpacked the bundle into (`sys._MEIPASS`), if any."""
    value = getattr(sys, "_MEIPASS", None)
    return value if isinstance(value, str) else None


def is_frozen() -> bool:
    """True inside the PyInstaller bundle, where sys.executable is the app, not Python."""
    return bool(getattr(sys, "frozen", False)) and _bundle_dir() is not None


def resources_root() -> Path:
    """The `resources/` folder: inside the bundle when frozen, else at the top of the checkout."""
    bundle = _bundle_dir()
    if is_frozen() and bundle is not None:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parents[1] / "resources"


def resource_path(*parts: str) -> Path:
    return resources_root().joinpath(*parts)


def python_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """The argv that runs `python -m <module> <args>` with this process's Python: the interpreter
    itself from a checkout, the bundle's executable with MODULE_SWITCH when frozen. A `python`
    given names another interpreter, which always takes `-m`."""
    if python:
        return [python, "-m", module, *args]
    if is_frozen():
        return [sys.executable, MODULE_SWITCH, module, *args]
    return [sys.executable, "-m", module, *args]


def run_json_command(argv: Sequence[str], what: str) -> Any:
    """Run one of Cairn's own `--json` commands (`cairnctl new`, `capture`) in a child process
    and return its answer. A refusal comes back as a CairnError in the child's own words (its
    last line on stderr), or saying that `what` failed when it said nothing."""
    proc = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise CairnError(
            lines[-1].removeprefix("cairnctl: ")
            if lines
            else f"{what} failed (exit code {proc.returncode})"
        )
    return json.loads(proc.stdout)


def restore_library_path(environ: MutableMapping[str, str] | None = None) -> None:
    """In the bundle: give the programs Cairn starts (git, docker, agents) the library path the
    user had, not the bundle's, whose libraries may not suit them. This process keeps the one it
    started with (the dynamic loader reads it once), and Cairn's own helpers get the bundle's
    again from the bootloader."""
    if not is_frozen():
        return
    env = os.environ if environ is None else environ
    saved = env.pop(SAVED_LIBRARY_PATH, None)
    if saved is not None:
        env["LD_LIBRARY_PATH"] = saved
    else:
        env.pop("LD_LIBRARY_PATH", None)


def bundle_entry(main_module: str) -> None:
    """What each of the bundle's executables runs: one of Cairn's helper processes when the
    command line asks for it with MODULE_SWITCH, else `main()` of `main_module`, which is
    imported only then (so a helper process never loads Qt). Exits with the exit code."""
    restore_library_path()
    code = run_module_switch(sys.argv[1:])
    if code is None:
        code = importlib.import_module(main_module).main()
    sys.exit(code)


def run_module_switch(argv: Sequence[str]) -> int | None:
    """For the bundle's executables: when `argv` (without the program name) is
    `MODULE_SWITCH <module> [args]`, run the module as `__main__` the way `python -m` does and
    return its exit code (a SystemExit it raises goes on up); otherwise None."""
    if not argv or argv[0] != MODULE_SWITCH:
        return None
    if len(argv) < 2:
        print(f"usage: {Path(sys.argv[0]).name} {MODULE_SWITCH} MODULE [ARG ...]", file=sys.stderr)
        return 2
    module, args = argv[1], list(argv[2:])
    sys.argv = [module, *args]  # runpy puts the module's file name in sys.argv[0]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def stop_process(pid: int, running: Callable[[], bool], timeout: float) -> bool:
    """Stop one of Cairn's own background processes: SIGTERM, then SIGKILL, each given
    `timeout` seconds; `running()` says whether it still serves. True once it is gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not running():
                return True
            time.sleep(0.02)
    return not running()
