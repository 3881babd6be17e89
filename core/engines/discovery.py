"""Finding an engine's program where people install it, and judging whether it can run.

Owns the search: the binary named in the settings (which wins), then PATH, npm's global prefix,
the native installer's ~/.local/bin and versions folder, nvm, volta, asdf, pnpm and bun; each
hit followed to its native Linux executable (`core.engines.native`) and probed for the features
the engine uses (`core.engines.capabilities`). What it finds is a `Found`: what the person has,
what Cairn mounts, its version, and a problem with its fix or a note. Starting runs with it
belongs to the runs service; showing it to the sandbox's settings and first-run screens.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from core.engines import capabilities, engine_for, native
from core.engines.base import Engine, EngineSettings

NPM_TIMEOUT_S = 1.0  # `npm prefix -g`, asked only when nothing else says where the prefix is
MAX_PROBED = 4  # binaries probed per search before the best refusal is given


@dataclass(frozen=True)
class Found:
    """What was found for one engine."""

    engine: str
    path: Path | None  # what the person has: the PATH entry, shim or wrapper (shown to them)
    binary: Path | None  # the native Linux executable to mount into the sandbox (links resolved)
    version: str | None
    source: str  # "settings", "PATH", "npm global", "native installer", "nvm", "volta", …
    problem: str | None  # None when usable; else one line naming what is wrong and the fix
    missing: tuple[str, ...] = ()  # features the binary lacks (flags/subcommands the engine uses)
    note: str | None = None  # e.g. "untested version 2.1.197: it has every flag the engine uses"

    @property
    def usable(self) -> bool:
        return self.problem is None


def settings_with(settings: EngineSettings, found: Found) -> EngineSettings:
    """The settings a launch uses: the found native binary in place of whatever was (or was
    not) configured."""
    if found.binary is None:
        return settings
    return replace(settings, binary=str(found.binary))


# -- where npm puts global packages ------------------------------------------------------------

_prefix_cache: dict[tuple[object, ...], Path | None] = {}
_prefix_lock = threading.Lock()


def clear_caches() -> None:
    """Forget probes and npm prefixes (after an install, or in tests)."""
    with _prefix_lock:
        _prefix_cache.clear()
    capabilities.clear_cache()


def _npmrc_prefix(path: Path, env: Mapping[str, str], home: Path) -> Path | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        match = re.match(r"\s*prefix\s*=\s*(.+?)\s*$", line)
        if match:
            value = match.group(1).strip("\"'")
            value = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), value)
            if value.startswith("~"):
                value = str(home) + value[1:]
            return Path(value)
    return None


def _which(command: str, env: Mapping[str, str]) -> Path | None:
    found = shutil.which(command, path=env.get("PATH", ""))
    return Path(found) if found else None


def npm_prefix(env: Mapping[str, str], home: Path) -> Path | None:
    """npm's global prefix, worked out the way npm does (its environment variable, the user's
    .npmrc, the global npmrc beside node, node's own prefix) and only when all of those are
    silent by asking npm. Cached per environment."""
    npmrc = home / ".npmrc"
    try:
        npmrc_mtime = npmrc.stat().st_mtime_ns
    except OSError:
        npmrc_mtime = 0
    key = (
        env.get("NPM_CONFIG_PREFIX"),
        env.get("npm_config_prefix"),
        env.get("NPM_CONFIG_USERCONFIG"),
        env.get("PATH"),
        str(home),
        npmrc_mtime,
    )
    with _prefix_lock:
        if key in _prefix_cache:
            return _prefix_cache[key]
    prefix = _find_npm_prefix(env, home)
    with _prefix_lock:
        _prefix_cache[key] = prefix
    return prefix


def _find_npm_prefix(env: Mapping[str, str], home: Path) -> Path | None:
    for name in ("NPM_CONFIG_PREFIX", "npm_config_prefix"):
        if env.get(name):
            return Path(env[name]).expanduser()
    userconfig = Path(env.get("NPM_CONFIG_USERCONFIG") or home / ".npmrc")
    prefix = _npmrc_prefix(userconfig, env, home)
    if prefix is not None:
        return prefix
    node = _which("node", env)
    if node is not None:
        node_prefix = node.resolve().parent.parent
        return _npmrc_prefix(node_prefix / "etc" / "npmrc", env, home) or node_prefix
    npm = _which("npm", env)
    if npm is None:
        return None
    try:
        done = subprocess.run(
            [str(npm), "prefix", "-g"],
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=NPM_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return Path(out) if done.returncode == 0 and out else None


# -- the places ---------------------------------------------------------------------------------


def _newest_first(paths: list[Path]) -> list[Path]:
    return sorted(paths, key=lambda p: capabilities.version_tuple(p.name.lstrip("v")), reverse=True)


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _prefix_places(prefix: Path, eng: Engine) -> list[Path]:
    """A global npm prefix's bin link, then the package itself (a missing or broken link)."""
    command = eng.command or ""
    out = [prefix / "bin" / command]
    if eng.npm_package:
        out.append(prefix / "lib" / "node_modules" / eng.npm_package)
    return out


def candidates(eng: Engine, env: Mapping[str, str], home: Path) -> Iterator[tuple[str, Path]]:
    """(source, path) for every place the engine's program may be, most likely first. Paths
    may not exist."""
    command = eng.command
    if not command:
        return
    for folder in env.get("PATH", "").split(os.pathsep):
        if folder:
            yield "PATH", Path(folder) / command
    prefix = npm_prefix(env, home)
    if prefix is not None:
        for path in _prefix_places(prefix, eng):
            yield "npm global", path
    yield "native installer", home / ".local" / "bin" / command
    if command == "claude":
        versions = home / ".local" / "share" / "claude" / "versions"
        for path in _newest_first(_children(versions)):
            yield "native installer", path
    nvm = Path(env.get("NVM_DIR") or home / ".nvm")
    for node in _newest_first(_children(nvm / "versions" / "node")):
        for path in _prefix_places(node, eng):
            yield "nvm", path
    volta = Path(env.get("VOLTA_HOME") or home / ".volta")
    yield "volta", volta / "bin" / command
    if eng.npm_package:
        yield "volta", volta / "tools" / "image" / "packages" / eng.npm_package
    asdf = Path(env.get("ASDF_DATA_DIR") or home / ".asdf")
    yield "asdf", asdf / "shims" / command
    for node in _newest_first(_children(asdf / "installs" / "nodejs")):
        for path in _prefix_places(node, eng):
            yield "asdf", path
    pnpm = Path(env.get("PNPM_HOME") or home / ".local" / "share" / "pnpm")
    yield "pnpm", pnpm / command
    bun = Path(env.get("BUN_INSTALL") or home / ".bun")
    yield "bun", bun / "bin" / command
    if eng.npm_package:
        yield "bun", bun / "install" / "global" / "node_modules" / eng.npm_package


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


# -- the search ---------------------------------------------------------------------------------


def find_engine(
    name: str,
    settings: EngineSettings,
    *,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Found:
    """The engine's program as the person installed it: the configured binary when there is
    one, else the first usable one in the usual places; when none is usable, the first one
    found with its problem, or a problem saying how to install it."""
    eng = engine_for(name)
    env = os.environ if env is None else env
    home = Path(home) if home is not None else Path(env.get("HOME") or Path.home())
    if not eng.command:
        return Found(name, None, None, None, "built in", None)
    if settings.binary:
        path = Path(settings.binary).expanduser()
        return _judge(eng, settings, "settings", path, native.resolve(path, eng))
    first: Found | None = None
    seen: set[Path] = set()  # places and native binaries already judged
    probed = 0
    for source, path in candidates(eng, env, home):
        if not _exists(path):
            continue
        try:
            real = path.resolve()
        except OSError:
            continue
        if real in seen:
            continue
        seen.add(real)
        resolved = native.resolve(path, eng)
        if resolved.binary is not None:
            if resolved.binary in seen and resolved.binary != real:
                continue  # the same binary, reached another way
            seen.add(resolved.binary)
            probed += 1
        found = _judge(eng, settings, source, path, resolved)
        if found.usable:
            if first is not None and first.problem:
                note = f"the one at {first.path} is not used: {first.problem}"
                found = replace(found, note="; ".join(n for n in (found.note, note) if n))
            return found
        first = first or found
        if probed >= MAX_PROBED:
            break
    if first is not None:
        return first
    return Found(
        name,
        None,
        None,
        None,
        "",
        f"{eng.label or name} was not found on PATH or where npm, nvm, volta, asdf, pnpm, bun "
        f"or its installer put it: install it with `{eng.install_hint()}`, or set "
        f"engines.{name}.binary",
    )


def _judge(
    eng: Engine, settings: EngineSettings, source: str, path: Path, resolved: native.Resolved
) -> Found:
    if resolved.binary is None:
        why = resolved.problem or f"{path} cannot be used"
        if source == "settings" and not _exists(path):
            why = (
                f"engines.{eng.name}.binary is {path}, which does not exist: fix the setting, "
                f"or unset it to use the {eng.command} on PATH"
            )
        elif source == "settings":
            why = f"engines.{eng.name}.binary ({path}) cannot be used: {why}"
        return Found(eng.name, path, None, None, source, why)
    probe = capabilities.probe(resolved.binary, eng.features())
    problem, note = eng.judge(probe, settings)
    return Found(
        eng.name,
        path,
        resolved.binary,
        probe.version,
        source,
        problem,
        () if probe.error else probe.missing,
        note,
    )
