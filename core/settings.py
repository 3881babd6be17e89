"""Settings: the data folder's `settings.json` (per-engine binary, version, endpoint, model and the
name of the keyring secret holding the API key), read, validated and replaced atomically.

Owns the file's IO, the key names and value checks, and turning an engine's endpoint into an
allowlist entry. What an engine does with its settings is core.engines'; enforcing the allowlist
is the sandbox policy's and the egress proxy's. Secret values never go here, only their names.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from core.errors import CairnError, InputError

FILE_NAME = "settings.json"

# Engines whose modules may not be registered yet still take settings, so a person can configure
# them before the first run.
EXTRA_ENGINES = ("claude-code", "codex")

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_TEXT = 500


def settings_path(data_root: str | os.PathLike[str]) -> Path:
    return Path(data_root) / FILE_NAME


def known_engines() -> list[str]:
    from core.engines import ENGINES
    return sorted(set(ENGINES) | set(EXTRA_ENGINES))


def engine_keys() -> list[str]:
    from core.engines.base import EngineSettings
    return [f.name for f in fields(EngineSettings)]


# -- keys and values -----------------------------------------------------------------------------

def parse_key(key: str, *, leaf: bool = True) -> tuple[str, str | None]:
    """`engines.<engine>.<key>` → (engine, key); with `leaf=False`, `engines.<engine>` is allowed
    too (key None). Unknown engines and keys are refused with one line naming the known ones."""
    parts = key.split(".") if isinstance(key, str) else []
    if len(parts) not in ((3,) if leaf else (2, 3)) or parts[0] != "engines":
        shape = "engines.<engine>.<key>" if leaf else "engines.<engine>[.<key>]"
        raise InputError(f"{key!r} is not a settings key: use {shape}, e.g. engines.codex.model")
    engine = parts[1]
    if engine not in known_engines():
        raise InputError(f"unknown engine {engine!r} in {key!r} (known: {', '.join(known_engines())})")
    name = parts[2] if len(parts) == 3 else None
    if name is not None and name not in engine_keys():
        raise InputError(f"unknown engine setting {name!r} in {key!r} "
                         f"(known: {', '.join(engine_keys())})")
    return engine, name


def validate_value(name: str, value: str) -> str:
    """The value to store for an engine setting, or InputError (one line)."""
    if not isinstance(value, str):
        raise InputError(f"the setting {name} takes text, not {type(value).__name__}")
    value = value.strip()
    if not value:
        raise InputError(f"the setting {name} needs a value (use `config unset` to remove it)")
    if len(value) > _MAX_TEXT or any(ch in value for ch in "\n\r\0"):
        raise InputError(f"the setting {name} must be one line of at most {_MAX_TEXT} characters")
    if name == "binary":
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise InputError(f"the engine binary must be an absolute path on this machine, "
                             f"not {value!r}")
        return str(path)
    if name == "base_url":
        endpoint_of(value)  # refuses what could not become an allowlist entry
        return value
    if name == "api_key_secret":
        from core.credentials import validate_secret_name
        return validate_secret_name(value)
    return value


def endpoint_of(base_url: str) -> str:
    """`http(s)://host[:port]/...` → the normalised `host:port` it connects to."""
    from core.sandbox.egress import DestinationError, parse_destination
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{base_url!r} is not a usable URL: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise InputError(f"the endpoint must be an http:// or https:// URL with a host, "
                         f"not {base_url!r}")
    if parts.username or parts.password:
        raise InputError("the endpoint URL must not hold a user name or password; keep the key "
                         "in the keyring and name it with api_key_secret")
    host = parts.hostname
    host = f"[{host}]" if ":" in host else host
    try:
        return str(parse_destination(f"{host}:{port or _DEFAULT_PORTS[parts.scheme]}"))
    except DestinationError as exc:
        raise InputError(f"the endpoint {base_url!r} names no usable host: {exc}") from None


def endpoint_allow_entry(settings: Any) -> str | None:
    """The `host:port` the `allowlist` network policy must admit for an engine to reach its
    configured endpoint (`base_url`), or None when no endpoint is configured.

    `settings` is an EngineSettings, a dict of one engine's settings, or None.
    """
    if settings is None:
        return None
    base_url = settings.get("base_url") if isinstance(settings, dict) else \
        getattr(settings, "base_url", None)
    if not base_url:
        return None
    return endpoint_of(base_url)


def policy_with_endpoint(policy: Any, settings: Any) -> Any:
    """The policy a sandbox should be made under: under `allowlist`, the engine's endpoint added
    to the allowed destinations. The version is kept: this is the same policy, applied."""
    from dataclasses import replace
    entry = endpoint_allow_entry(settings)
    if entry is None or policy.network != "allowlist" or entry in policy.allow:
        return policy
    return replace(policy, allow=tuple(policy.allow) + (entry,))


# -- the file ------------------------------------------------------------------------------------

def read_settings(path: str | os.PathLike[str]) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise CairnError(f"the settings file {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise CairnError(f"the settings file {path} does not hold a JSON object")
    return data


def write_settings(path: str | os.PathLike[str], data: dict) -> None:
    """Replace the file atomically: a reader sees the old or the new file, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def _editing(path: Path) -> Iterator[dict]:
    """Read-modify-write under an exclusive lock, so two writers (the GUI and `cairnctl`) never
    lose each other's change; the edited dict is written when the block ends normally."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        data = read_settings(path)
        yield data
        write_settings(path, data)
    finally:
        os.close(lock_fd)


def _engines_of(data: dict, path: Path) -> dict:
    engines = data.setdefault("engines", {})
    if not isinstance(engines, dict):
        raise CairnError(f"the settings file {path} has an 'engines' entry that is not an object")
    return engines


def set_setting(path: str | os.PathLike[str], key: str, value: str) -> str:
    """Validate and store one engine setting; returns the value as stored."""
    engine, name = parse_key(key)
    assert name is not None
    stored = validate_value(name, value)
    path = Path(path)
    with _editing(path) as data:
        engines = _engines_of(data, path)
        section = engines.setdefault(engine, {})
        if not isinstance(section, dict):
            raise CairnError(f"the settings file {path} has engines.{engine} that is not an object")
        section[name] = stored
    return stored


def unset_setting(path: str | os.PathLike[str], key: str) -> bool:
    """Remove one engine setting; whether it was set."""
    engine, name = parse_key(key)
    path = Path(path)
    with _editing(path) as data:
        engines = _engines_of(data, path)
        section = engines.get(engine)
        if not isinstance(section, dict) or name not in section:
            return False
        del section[name]
        if not section:
            del engines[engine]
        if not engines:
            del data["engines"]
    return True


def get_setting(path: str | os.PathLike[str], key: str) -> Any:
    """One engine setting (None when unset), or with `engines.<engine>` all of that engine's."""
    engine, name = parse_key(key, leaf=False)
    section = read_settings(path).get("engines", {})
    section = section.get(engine) if isinstance(section, dict) else None
    if name is None:
        return dict(section) if isinstance(section, dict) else {}
    return section.get(name) if isinstance(section, dict) else None
