"""From what a person has (a command on PATH, a shim, a node wrapper, a link into an npm package)
to the native Linux executable that Cairn mounts into the sandbox.

Owns reading executables' headers (ELF class, architecture, C library), following symbolic
links, `#!` scripts and shims (volta, asdf, pnpm, plain `exec` wrappers) and npm packages to
their platform binary. Which package holds which binary is each engine's own knowledge
(`Engine.native_in_package`); where to look in the first place belongs to
`core.engines.discovery`.
"""

from __future__ import annotations

import json
import os
import platform
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.engines.base import Engine
from core.errors import InputError

_MAX_HOPS = 8  # links and wrappers followed from one starting point
_SCRIPT_BYTES = 64 * 1024  # how much of a wrapper script is read
_ARCH_BY_MACHINE = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_ELF_MACHINES = {62: "x64", 183: "arm64", 3: "x86", 40: "arm", 243: "riscv64"}
_LINUX_TRIPLES = {"x64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}
_PT_INTERP = 3


def host_arch() -> str:
    """This machine's architecture in npm's words: "x64", "arm64" (or the raw machine name)."""
    machine = platform.machine().lower()
    return _ARCH_BY_MACHINE.get(machine, machine)


def linux_triple(arch: str | None = None) -> str:
    """The Rust target triple of the static Linux builds (Codex ships musl ones)."""
    arch = arch or host_arch()
    return _LINUX_TRIPLES.get(arch, f"{arch}-unknown-linux-musl")


@dataclass(frozen=True)
class Elf:
    arch: str  # "x64", "arm64", … or "machine N"
    linux: bool  # OS ABI System V or GNU/Linux
    interpreter: str | None  # the dynamic loader; None for a static executable


def read_elf(path: Path) -> Elf | None:
    """The header of an ELF executable, or None for anything else (scripts, other formats)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF":
                return None
            wide = head[4] == 2
            order = "<" if head[5] == 1 else ">"
            machine = struct.unpack_from(order + "H", head, 18)[0]
            if wide:
                phoff = struct.unpack_from(order + "Q", head, 32)[0]
                phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
            else:
                phoff = struct.unpack_from(order + "I", head, 28)[0]
                phentsize, phnum = struct.unpack_from(order + "HH", head, 42)
            interpreter = None
            for i in range(min(phnum, 64)):
                f.seek(phoff + i * phentsize)
                entry = f.read(phentsize)
                if len(entry) < (56 if wide else 32):
                    break
                if struct.unpack_from(order + "I", entry, 0)[0] != _PT_INTERP:
                    continue
                if wide:
                    offset = struct.unpack_from(order + "Q", entry, 8)[0]
                    size = struct.unpack_from(order + "Q", entry, 32)[0]
                else:
                    offset = struct.unpack_from(order + "I", entry, 4)[0]
                    size = struct.unpack_from(order + "I", entry, 16)[0]
                f.seek(offset)
                interpreter = f.read(min(size, 4096)).split(b"\0")[0].decode("ascii", "replace")
                break
    except (OSError, struct.error):
        return None
    return Elf(_ELF_MACHINES.get(machine, f"machine {machine}"), head[7] in (0, 3), interpreter)


def foreign_format(path: Path) -> str | None:
    """ "a macOS build" / "a Windows build" for executables of other systems, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return None
    if head in (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf", b"\xca\xfe\xba\xbe"):
        return "a macOS build"
    if head[:2] == b"MZ":
        return "a Windows build"
    return None


def elf_problem(path: Path, elf: Elf) -> str | None:
    """Why this ELF cannot run in Cairn's sandbox (Debian, glibc, this machine's architecture)."""
    if not elf.linux:
        return f"{path} is not a Linux executable"
    if elf.arch != host_arch():
        return f"{path} is built for {elf.arch}, but this machine is {host_arch()}"
    if elf.interpreter and "musl" in elf.interpreter:
        return (
            f"{path} is a musl build (it needs {elf.interpreter}); the sandbox runs Debian "
            f"(glibc): install the package's glibc build"
        )
    return None


@dataclass(frozen=True)
class Resolved:
    binary: Path | None  # the native executable (links resolved), when one was reached
    problem: str | None = None  # why none could be, with the fix
    via: tuple[Path, ...] = ()  # the wrappers and links passed on the way


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def enclosing_package(path: Path, names: tuple[str, ...], *, levels: int = 6) -> Path | None:
    """The folder of the npm package named one of `names` that holds `path`."""
    folder = path.parent
    for _ in range(levels):
        manifest = read_json(folder / "package.json")
        if manifest is not None and manifest.get("name") in names:
            return folder
        if folder.parent == folder:
            break
        folder = folder.parent
    return None


def package_candidates(package: Path, name: str) -> list[Path]:
    """Where node would find package `name` from inside `package`: its own node_modules, then
    each enclosing node_modules (a sibling in a flat install)."""
    out = [package / "node_modules" / name]
    for parent in package.parents:
        if parent.name == "node_modules":
            out.append(parent / name)
    return out


def _script_text(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(_SCRIPT_BYTES)
    except OSError:
        return None
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", "replace")


def _shebang(text: str) -> list[str]:
    if not text.startswith("#!"):
        return []
    return text[2:].splitlines()[0].split()


def _is_node_script(text: str) -> bool:
    words = _shebang(text)
    return any(os.path.basename(w) in ("node", "nodejs", "bun", "deno") for w in words)


def _asdf_targets(shim: Path, text: str, command: str) -> list[Path]:
    """asdf's shims name their plugin and versions: `# asdf-plugin: nodejs 22.11.0`."""
    data_dir = shim.parent.parent
    out = []
    for plugin, version in re.findall(r"^#\s*asdf-plugin:\s*(\S+)\s+(\S+)", text, re.MULTILINE):
        out.append(data_dir / "installs" / plugin / version / "bin" / command)
    return out


def _volta_targets(shim: Path, engine: Engine) -> list[Path]:
    """volta's shims are one binary (volta-shim) that picks the tool by its own name; the tool's
    package sits in tools/image/packages/<package>/lib/node_modules/<package>."""
    if not engine.npm_package:
        return []
    volta_home = shim.parent.parent
    image = volta_home / "tools" / "image" / "packages" / engine.npm_package
    return [image / "lib" / "node_modules" / engine.npm_package, image / "bin" / shim.name]


def _script_targets(script: Path, text: str) -> list[Path]:
    """Absolute (or `$basedir`-relative, as pnpm writes them) paths a wrapper script runs."""
    basedir = str(script.parent)
    text = re.sub(r"\$\{?basedir\}?", basedir, text)
    text = re.sub(r"\$\(dirname \"\$0\"\)", basedir, text)
    out = []
    for token in re.findall(r"""(/[^\s"'`;|&()<>$]+)""", text):
        candidate = Path(token)
        if candidate == script or candidate.name in ("sh", "bash", "env", "node", "exec"):
            continue
        if candidate.is_file():
            out.append(candidate)
    return out


def resolve_binary(engine: Engine, binary: str) -> Path:
    """The native executable a configured binary (maybe a link, shim or node wrapper) ends in;
    InputError naming why there is none and how to point the setting elsewhere."""
    resolved = resolve(Path(binary), engine)
    if resolved.binary is None:
        raise InputError(
            f"the {engine.label} binary {binary} cannot be used: {resolved.problem}",
            hint=f"set engines.{engine.name}.binary to the `{engine.command}` you run, or unset "
            "it to use the one on PATH",
        )
    return resolved.binary


def resolve(path: Path, engine: Engine) -> Resolved:
    """The native Linux executable that `path` (what a person runs) ends in, or the reason
    there is none with its fix."""
    return _resolve(Path(path).expanduser(), engine, (), _MAX_HOPS)


def _resolve(path: Path, engine: Engine, via: tuple[Path, ...], hops: int) -> Resolved:
    if hops <= 0:
        return Resolved(None, f"{via[0] if via else path} leads through too many wrappers", via)
    if not path.exists():
        return Resolved(None, f"{path} does not exist", via)
    real = path.resolve()
    if real != path:
        via = (*via, path)
    if real.is_dir():
        return _from_package(real, engine, via, hops)
    if real.name == "volta-shim" or (
        real.parent.name == "bin" and real.parent.parent.name == ".volta"
    ):
        for target in _volta_targets(path, engine):
            if target.exists():
                return _resolve(target, engine, via, hops - 1)
        return Resolved(None, f"{path} is a volta shim for a tool volta has not installed", via)
    elf = read_elf(real)
    if elf is not None:
        problem = elf_problem(real, elf)
        return Resolved(None if problem else real, problem, via)
    foreign = foreign_format(real)
    if foreign:
        return Resolved(None, f"{real} is {foreign}; the sandbox runs Linux", via)
    names = tuple(n for n in (engine.npm_package,) if n)
    package = enclosing_package(real, names) if names else None
    if package is not None:
        return _from_package(package, engine, (*via, real), hops)
    text = _script_text(real)
    if text is None:
        return Resolved(None, f"{real} is not an executable Cairn can run in the sandbox", via)
    if _is_node_script(text):
        return Resolved(
            None,
            f"{real} is a Node.js script outside the {engine.npm_package or engine.name} "
            f"package; the sandbox has no Node.js: point at the native binary instead",
            via,
        )
    command = engine.command or path.name
    for target in [*_asdf_targets(path, text, command), *_script_targets(real, text)]:
        if target.exists():
            return _resolve(target, engine, (*via, real), hops - 1)
    return Resolved(None, f"{real} is a script that runs no program Cairn can find", via)


def _from_package(package: Path, engine: Engine, via: tuple[Path, ...], hops: int) -> Resolved:
    manifest = read_json(package / "package.json")
    if manifest is None or manifest.get("name") != engine.npm_package:
        return Resolved(None, f"{package} is not the {engine.npm_package} package", via)
    native = engine.native_in_package(package)
    if native is None:
        return Resolved(None, engine.package_problem(package, manifest), (*via, package))
    return _resolve(native, engine, (*via, package), hops - 1)
