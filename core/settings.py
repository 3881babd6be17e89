"""Settings: the data folder's `settings.json` (per-engine binary, version, endpoint, model and the
name of the keyring secret holding the API key; the defaults new tasks and sandboxes start from),
read, validated and replaced atomically.

Owns the file's IO, the key names and value checks, and turning an engine's endpoint into an
allowlist entry. What an engine does with its settings is core.engines'; enforcing the allowlist
is the sandbox policy's and the egress proxy's; applying the defaults is core.tasks'. Secret
values never go here, only their names.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from core.credentials import validate_secret_name
from core.engines import ENGINES, engine_for
from core.engines.base import EngineSettings
from core.errors import CairnError, InputError
from core.policy import NETWORK_ALLOWLIST, NETWORK_MODES, NETWORK_NONE, NETWORK_OPEN, Policy
from core.safe_fs import fsync_dir
from core.sandbox import hosts as sandbox_hosts
from core.sandbox.egress import Allowlist, DestinationError, parse_destination

FILE_NAME = "settings.json"

# Engines whose modules may not be registered yet still take settings, so a person can configure
# them before the first run.
EXTRA_ENGINES = ("claude-code", "codex")

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MAX_TEXT = 500

ENGINES_SECTION = "engines"
DEFAULTS_SECTION = "defaults"
# What a new task or sandbox starts from when nothing else chose: `defaults.<key>`.
DEFAULT_KEYS = ("engine", "image", "network", "allow", "backend", "host")
# docker: containers on a sandbox host (`defaults.host`: the local Docker engine, a rootless
# Podman, …); host: no isolation at all, only on the user's explicit choice.
BACKENDS = ("docker", "host")
# The engines sandboxes may run on, beside the built-in `local` and `podman`:
# `hosts.<name>` = "<engine> <address>" (core.sandbox.hosts).
HOSTS_SECTION = "hosts"

# What tokens cost when the engine reports no cost of its own (Codex; Claude Code reports one):
# `prices.<model>` = "input=…,output=…,cache_read=…,cache_write=…" in USD per million tokens. A
# model is priced by its own entry or the longest entry it starts with followed by `-` (a dated
# release). The figures below are the providers' list prices when this table was last checked;
# an entry in the settings replaces the one here.
PRICES_SECTION = "prices"
PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")
DEFAULT_PRICES: dict[str, dict[str, float]] = {
    name: dict(zip(PRICE_FIELDS, figures, strict=True))
    for name, figures in {
        "claude-opus-4-5": (5.0, 25.0, 0.5, 6.25),
        "claude-opus-4-1": (15.0, 75.0, 1.5, 18.75),
        "claude-opus-4": (15.0, 75.0, 1.5, 18.75),
        "claude-sonnet-4-5": (3.0, 15.0, 0.3, 3.75),
        "claude-sonnet-4": (3.0, 15.0, 0.3, 3.75),
        "claude-haiku-4-5": (1.0, 5.0, 0.1, 1.25),
        "claude-3-5-haiku": (0.8, 4.0, 0.08, 1.0),
        "gpt-5": (1.25, 10.0, 0.125, 1.25),
        "gpt-5-codex": (1.25, 10.0, 0.125, 1.25),
        "gpt-5-mini": (0.25, 2.0, 0.025, 0.25),
        "gpt-5-nano": (0.05, 0.4, 0.005, 0.05),
        "gpt-5.1": (1.25, 10.0, 0.125, 1.25),
        "gpt-5.1-codex": (1.25, 10.0, 0.125, 1.25),
        "gpt-5.1-codex-mini": (0.25, 2.0, 0.025, 0.25),
    }.items()
}
_MAX_PRICE = 100_000.0
_MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,127}")

# A Docker image reference: [registry[:port]/]name[/name...][:tag][@algorithm:digest].
_IMAGE_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_HOST = rf"(?:{_IMAGE_LABEL}(?:\.{_IMAGE_LABEL})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?/"
_IMAGE_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_DIGEST = r"@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}"
_IMAGE_RE = re.compile(
    rf"(?:{_IMAGE_HOST})?{_IMAGE_NAME}(?:/{_IMAGE_NAME})*"
    rf"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:{_IMAGE_DIGEST})?"
)
_MAX_IMAGE = 255


def settings_path(data_root: str | os.PathLike[str]) -> Path:
    return Path(data_root) / FILE_NAME


def known_engines() -> list[str]:
    return sorted(set(ENGINES) | set(EXTRA_ENGINES))


def engine_keys() -> list[str]:
    return [f.name for f in fields(EngineSettings)]


# -- keys and values -----------------------------------------------------------------------------


def _shapes() -> str:
    return "engines.<engine>.<key>, defaults.<key>, hosts.<name> or prices.<model>"


def parse_key(key: str, *, leaf: bool = True) -> tuple[str, str | None]:
    """`engines.<engine>.<key>` → (engine, key); with `leaf=False`, `engines.<engine>` is allowed
    too (key None). Unknown engines and keys are refused with one line naming the known ones."""
    parts = key.split(".") if isinstance(key, str) else []
    if len(parts) not in ((3,) if leaf else (2, 3)) or parts[0] != ENGINES_SECTION:
        shape = "engines.<engine>.<key>" if leaf else "engines.<engine>[.<key>]"
        raise InputError(f"{key!r} is not a settings key: use {shape}, e.g. engines.codex.model")
    engine = parts[1]
    if engine not in known_engines():
        raise InputError(
            f"unknown engine {engine!r} in {key!r} (known: {', '.join(known_engines())})"
        )
    name = parts[2] if len(parts) == 3 else None
    if name is not None and name not in engine_keys():
        raise InputError(
            f"unknown engine setting {name!r} in {key!r} (known: {', '.join(engine_keys())})"
        )
    return engine, name


def parse_any_key(key: str, *, leaf: bool = True) -> tuple[str, str | None, str | None]:
    """Any settings key → (section, engine, name): `engines.<engine>.<key>` is
    ("engines", engine, key), `defaults.<key>` is ("defaults", None, key). With `leaf=False` the
    groups `engines.<engine>` and `defaults` are allowed too (name None)."""
    parts = key.split(".") if isinstance(key, str) else []
    if parts and parts[0] == HOSTS_SECTION:
        if len(parts) == 1 and not leaf:
            return HOSTS_SECTION, None, None
        if len(parts) != 2:
            raise InputError(f"{key!r} is not a settings key: use hosts.<name>, e.g. hosts.podman")
        return HOSTS_SECTION, None, sandbox_hosts.check_name(parts[1])
    if parts and parts[0] == PRICES_SECTION:
        model = key.partition(".")[2]  # a model's name may hold dots: gpt-5.1
        if not model and not leaf:
            return PRICES_SECTION, None, None
        return PRICES_SECTION, None, check_model_name(model)
    if parts and parts[0] == DEFAULTS_SECTION:
        if len(parts) == 1 and not leaf:
            return DEFAULTS_SECTION, None, None
        if len(parts) != 2:
            raise InputError(
                f"{key!r} is not a settings key: use defaults.<key> "
                f"(known: {', '.join(DEFAULT_KEYS)})"
            )
        if parts[1] not in DEFAULT_KEYS:
            raise InputError(
                f"unknown default {parts[1]!r} in {key!r} (known: {', '.join(DEFAULT_KEYS)})"
            )
        return DEFAULTS_SECTION, None, parts[1]
    if not parts or parts[0] != ENGINES_SECTION:
        raise InputError(
            f"{key!r} is not a settings key: use {_shapes()}, "
            f"e.g. engines.codex.model or defaults.engine"
        )
    engine, name = parse_key(key, leaf=leaf)
    return ENGINES_SECTION, engine, name


def validate_value(name: str, value: str) -> str:
    """The value to store for an engine setting, or InputError (one line)."""
    value = _one_line(name, value)
    if name == "binary":
        path = Path(value).expanduser()
        if not path.is_absolute():
            raise InputError(
                f"the engine binary must be an absolute path on this machine, not {value!r}"
            )
        return str(path)
    if name == "base_url":
        endpoint_of(value)  # refuses what could not become an allowlist entry
        return value
    if name == "api_key_secret":
        return validate_secret_name(value)
    return value


def _one_line(name: str, value: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"the setting {name} takes text, not {type(value).__name__}")
    value = value.strip()
    if not value:
        raise InputError(f"the setting {name} needs a value (use `config unset` to remove it)")
    if len(value) > _MAX_TEXT or any(ch in value for ch in "\n\r\0"):
        raise InputError(f"the setting {name} must be one line of at most {_MAX_TEXT} characters")
    return value


def validate_default(name: str, value: str) -> str:
    """The value to store for `defaults.<name>`, or InputError (one line)."""
    key = f"{DEFAULTS_SECTION}.{name}"
    value = _one_line(key, value)
    if name == "engine":
        if value not in known_engines():
            raise InputError(
                f"unknown engine {value!r} for {key} (known: {', '.join(known_engines())})"
            )
        return value
    if name == "image":
        if len(value) > _MAX_IMAGE or not _IMAGE_RE.fullmatch(value):
            raise InputError(
                f"{key} must be a Docker image reference such as cairn-sandbox:1, not {value!r}"
            )
        return value
    if name == "network":
        Policy(network=value).validate()
        return value
    if name == "allow":
        return ",".join(parse_allow(value))
    if name == "backend":
        if value not in BACKENDS:
            raise InputError(
                f"unknown sandbox backend {value!r} for {key} "
                f"(known: {', '.join(BACKENDS)}; host means no isolation)"
            )
        return value
    if name == "host":
        return sandbox_hosts.check_name(value)
    raise InputError(f"unknown default {name!r} (known: {', '.join(DEFAULT_KEYS)})")


def check_model_name(model: str) -> str:
    if not _MODEL_RE.fullmatch(model or ""):
        raise InputError(
            f"{model!r} is not a model name: use prices.<model>, e.g. prices.gpt-5.1-codex"
        )
    return model


def parse_price(text: str) -> dict[str, float]:
    """`input=1.25,output=10,cache_read=0.125,cache_write=1.25` (USD per million tokens) → the
    figures; input and output are needed, a cache figure left out is the input's."""
    prices: dict[str, float] = {}
    for part in _one_line("a price", text).split(","):
        name, eq, figure = part.partition("=")
        name = name.strip()
        if not eq or name not in PRICE_FIELDS:
            raise InputError(
                f"{part.strip()!r} is not a price: use {'=…,'.join(PRICE_FIELDS)}=… in USD per "
                "million tokens, e.g. input=3,output=15"
            )
        try:
            value = float(figure)
        except ValueError:
            raise InputError(f"the price {name}={figure.strip()!r} is not a number") from None
        if not 0 <= value <= _MAX_PRICE:
            raise InputError(f"the price {name}={figure.strip()} is out of range")
        prices[name] = value
    missing = [f for f in ("input", "output") if f not in prices]
    if missing:
        raise InputError(f"a price needs {' and '.join(missing)} (USD per million tokens)")
    for name in ("cache_read", "cache_write"):
        prices.setdefault(name, prices["input"])
    return prices


def price_text(prices: dict[str, float]) -> str:
    return ",".join(f"{f}={prices[f]:g}" for f in PRICE_FIELDS if f in prices)


def read_prices(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """The price table in force: the shipped one with the settings' `prices.<model>` entries
    over it. An entry edited by hand into something unusable is a CairnError naming it."""
    table = {name: dict(figures) for name, figures in DEFAULT_PRICES.items()}
    section = read_settings(path).get(PRICES_SECTION) or {}
    if not isinstance(section, dict):
        raise CairnError(f"the settings file {path} has a 'prices' entry that is not an object")
    for model, text in section.items():
        try:
            table[check_model_name(model)] = parse_price(text)
        except InputError as exc:
            raise CairnError(
                f"the settings file {path} has an unusable prices.{model}: {exc}"
            ) from None
    return table


def parse_allow(text: str) -> list[str]:
    """A comma-separated `host:port` list → its normalised entries (the egress proxy's parser),
    or InputError naming the first unusable entry."""
    entries: list[str] = []
    for raw in text.split(","):
        raw = raw.strip()
        if not raw:
            continue
        try:
            Allowlist([raw])
            entry = str(parse_destination(raw))
        except DestinationError as exc:
            raise InputError(
                f"the allowlist entry {raw!r} is not a usable host:port: {exc}"
            ) from None
        if entry not in entries:
            entries.append(entry)
    if not entries:
        raise InputError("defaults.allow needs at least one host:port, e.g. api.example.com:443")
    Policy(network=NETWORK_ALLOWLIST, allow=tuple(entries)).validate()
    return entries


def endpoint_of(base_url: str) -> str:
    """`http(s)://host[:port]/...` → the normalised `host:port` it connects to."""
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"{base_url!r} is not a usable URL: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise InputError(
            f"the endpoint must be an http:// or https:// URL with a host, not {base_url!r}"
        )
    if parts.username or parts.password:
        raise InputError(
            "the endpoint URL must not hold a user name or password; keep the key "
            "in the keyring and name it with api_key_secret"
        )
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
    base_url = (
        settings.get("base_url")
        if isinstance(settings, dict)
        else getattr(settings, "base_url", None)
    )
    if not base_url:
        return None
    return endpoint_of(base_url)


def engine_endpoint(engine: str, settings: EngineSettings) -> str | None:
    """The `host:port` of the model endpoint an engine's runs talk to (the settings' `base_url`,
    else the engine's own default), or None for an engine that talks to no model."""
    url = engine_for(engine).base_url(settings)
    return endpoint_of(url) if url else None


def reaches_endpoint(policy: Policy, endpoint: str | None) -> bool:
    """Whether a sandbox under `policy` can reach the engine's model endpoint: `open`, or
    `allowlist` (which admits the engine's endpoint by itself); never `none`."""
    return endpoint is None or policy.network in (NETWORK_OPEN, NETWORK_ALLOWLIST)


def refuse_unreachable(engine: str, policy: Policy, endpoint: str | None) -> None:
    """InputError, with the fix, when the engine could not reach its model under `policy`."""
    if not reaches_endpoint(policy, endpoint):
        raise InputError(
            f"the {engine} engine cannot reach its model at {endpoint} under the "
            f"network policy '{policy.network}'",
            hint="use the network policy 'allowlist' (the default for agent tasks: it admits "
            "only the model's endpoint), e.g. `--network allowlist`, or unset defaults.network",
        )


def policy_with_endpoint(policy: Policy, endpoint: str | None) -> Policy:
    """The policy a sandbox should be made under: under `allowlist`, the engine's endpoint added
    to the allowed destinations. The version is kept: this is the same policy, applied."""
    if endpoint is None or policy.network != NETWORK_ALLOWLIST or endpoint in policy.allow:
        return policy
    return dataclasses.replace(policy, allow=(*policy.allow, endpoint))


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
    replace_file(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_file(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` as the whole new content of `path`: a temporary beside it, fsynced, renamed
    over it, and the folder fsynced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


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


def _section_of(data: dict, path: Path, name: str) -> dict:
    section = data.setdefault(name, {})
    if not isinstance(section, dict):
        raise CairnError(f"the settings file {path} has a {name!r} entry that is not an object")
    return section


def _engines_of(data: dict, path: Path) -> dict:
    return _section_of(data, path, ENGINES_SECTION)


def check_setting(key: str, value: str) -> str:
    """The value `set_setting` would store for `key`, or InputError; nothing is written."""
    section_name, _engine, name = parse_any_key(key)
    assert name is not None
    if section_name == PRICES_SECTION:
        return price_text(parse_price(value))
    if section_name == HOSTS_SECTION:
        return sandbox_hosts.parse_value(name, value).value
    if section_name == DEFAULTS_SECTION:
        return validate_default(name, value)
    return validate_value(name, value)


def set_setting(path: str | os.PathLike[str], key: str, value: str) -> str:
    """Validate and store one setting (`engines.<engine>.<key>` or `defaults.<key>`); returns
    the value as stored."""
    section_name, engine, name = parse_any_key(key)
    assert name is not None
    path = Path(path)
    if section_name in (DEFAULTS_SECTION, PRICES_SECTION, HOSTS_SECTION):
        stored = check_setting(key, value)
        with _editing(path) as data:
            if section_name == DEFAULTS_SECTION and name == "host":
                configured = _section_of(data, path, HOSTS_SECTION)
                sandbox_hosts.pick(sandbox_hosts.all_hosts(configured), stored)
                if not configured:
                    del data[HOSTS_SECTION]
            _section_of(data, path, section_name)[name] = stored
        return stored
    stored = validate_value(name, value)
    with _editing(path) as data:
        engines = _engines_of(data, path)
        section = engines.setdefault(engine, {})
        if not isinstance(section, dict):
            raise CairnError(f"the settings file {path} has engines.{engine} that is not an object")
        section[name] = stored
    return stored


def unset_setting(path: str | os.PathLike[str], key: str) -> bool:
    """Remove one setting; whether it was set."""
    section_name, engine, name = parse_any_key(key)
    path = Path(path)
    with _editing(path) as data:
        if section_name in (DEFAULTS_SECTION, PRICES_SECTION, HOSTS_SECTION):
            entries = _section_of(data, path, section_name)
            removed = entries.pop(name, None) is not None
            if not entries:
                del data[section_name]
            return removed
        engines = _engines_of(data, path)
        section = engines.get(engine)
        if not isinstance(section, dict) or name not in section:
            if not engines:
                del data[ENGINES_SECTION]
            return False
        del section[name]
        if not section:
            del engines[engine]
        if not engines:
            del data[ENGINES_SECTION]
    return True


def get_setting(path: str | os.PathLike[str], key: str) -> Any:
    """One setting (None when unset), or with `engines.<engine>` all of that engine's, or with
    `defaults` every default that is set."""
    section_name, engine, name = parse_any_key(key, leaf=False)
    data = read_settings(path)
    if section_name in (DEFAULTS_SECTION, PRICES_SECTION, HOSTS_SECTION):
        section = data.get(section_name)
        section = section if isinstance(section, dict) else {}
        return dict(section) if name is None else section.get(name)
    section = data.get(ENGINES_SECTION, {})
    section = section.get(engine) if isinstance(section, dict) else None
    if name is None:
        return dict(section) if isinstance(section, dict) else {}
    return section.get(name) if isinstance(section, dict) else None


def read_defaults(path: str | os.PathLike[str]) -> dict[str, str]:
    """The defaults that are set, each checked again (the file may have been edited by hand):
    an unusable one is a CairnError naming the file and the key."""
    section = read_settings(path).get(DEFAULTS_SECTION) or {}
    if not isinstance(section, dict):
        raise CairnError(f"the settings file {path} has a 'defaults' entry that is not an object")
    checked: dict[str, str] = {}
    for name, value in section.items():
        if name not in DEFAULT_KEYS:
            continue  # a key of a later version: ignored, kept in the file
        try:
            checked[name] = validate_default(name, value)
        except InputError as exc:
            raise CairnError(
                f"the settings file {path} has an unusable defaults.{name}: {exc}"
            ) from None
    return checked


def read_hosts(path: str | os.PathLike[str]) -> dict[str, sandbox_hosts.SandboxHost]:
    """Every sandbox host by name: the built-in ones with the settings' `hosts.<name>` over
    them. An entry edited by hand into something unusable is a CairnError naming it."""
    section = read_settings(path).get(HOSTS_SECTION) or {}
    if not isinstance(section, dict):
        raise CairnError(f"the settings file {path} has a 'hosts' entry that is not an object")
    try:
        return sandbox_hosts.all_hosts(section)
    except InputError as exc:
        raise CairnError(f"the settings file {path} has an unusable host: {exc}") from None


def default_policy(defaults: dict[str, str], *, endpoint: str | None = None) -> Policy:
    """The sandbox policy a new task starts with: `defaults.network` and `defaults.allow` when the
    person set them; else, for an engine that talks to a model at `endpoint`, `allowlist` holding
    exactly that endpoint, and for the others no network at all."""
    allow = tuple(defaults["allow"].split(",")) if defaults.get("allow") else ()
    if defaults.get("network"):  # the person's choice, as they made it (an allowlist admits the
        return Policy(network=defaults["network"], allow=allow).validate()  # endpoint at start)
    network = NETWORK_ALLOWLIST if endpoint else NETWORK_NONE
    return policy_with_endpoint(Policy(network=network, allow=allow), endpoint).validate()


# The settings a sandbox manager is made from: changing one makes the next sandbox use a new one.
SANDBOX_KEYS = ("defaults.backend", "defaults.image", "defaults.host")


class Settings:
    """The data folder's settings file as a service: read, validated writes, the defaults and
    each engine's settings. Listeners hear of changes to the sandbox keys."""

    def __init__(self, data_root: str | os.PathLike[str]):
        self.path = settings_path(data_root)
        self._sandbox_listeners: list[Callable[[], None]] = []

    def on_sandbox_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` after a change to the default backend or image."""
        self._sandbox_listeners.append(listener)

    def _changed(self, key: str) -> None:
        if key in SANDBOX_KEYS or key.startswith(f"{HOSTS_SECTION}."):
            for listener in self._sandbox_listeners:
                listener()

    def read(self) -> dict:
        """The whole file as a dict (empty when there is none)."""
        return read_settings(self.path)

    def get(self, key: str) -> Any:
        return get_setting(self.path, key)

    def set(self, key: str, value: str) -> str:
        """Set `engines.<engine>.<key>` or `defaults.<key>` (validated; written atomically). A new
        default backend or image applies to the next sandbox use."""
        stored = set_setting(self.path, key, value)
        self._changed(key)
        return stored

    def unset(self, key: str) -> bool:
        removed = unset_setting(self.path, key)
        self._changed(key)
        return removed

    def check(self, key: str, value: str) -> str:
        """The value `set` would store, or InputError (one line); nothing is written."""
        return check_setting(key, value)

    def defaults(self) -> dict[str, str]:
        """The `defaults.<key>` settings that are set (engine, image, network, allow, backend,
        host)."""
        return read_defaults(self.path)

    def hosts(self) -> dict[str, sandbox_hosts.SandboxHost]:
        """Every sandbox host by name (the built-in `local` and `podman`, and `hosts.<name>`)."""
        return read_hosts(self.path)

    def host(self, name: str | None = None) -> sandbox_hosts.SandboxHost:
        """The host called `name`; without one, the default host (CAIRN_HOST, else
        `defaults.host`, else `local`). InputError when no host has that name."""
        if name is not None:
            return sandbox_hosts.pick(self.hosts(), name, where="the chosen host")
        env = os.environ.get("CAIRN_HOST")
        if env:
            return sandbox_hosts.pick(self.hosts(), env, where="CAIRN_HOST")
        return sandbox_hosts.pick(self.hosts(), self.defaults().get("host"))

    def keys(self) -> dict[str, list[str]]:
        """What the settings file takes: the default keys, the engines and each engine's keys,
        and the choices of the defaults that have a fixed set (for forms)."""
        return {
            "defaults": list(DEFAULT_KEYS),
            "engines": known_engines(),
            "engine_keys": engine_keys(),
            "networks": list(NETWORK_MODES),
            "backends": list(BACKENDS),
            "hosts": sorted(self.hosts()),
        }

    def prices(self) -> dict[str, dict[str, float]]:
        """The price table in force (USD per million tokens, by model): the shipped one with
        the settings' `prices.<model>` entries over it."""
        return read_prices(self.path)

    def default_policy_for(self, engine: str) -> Policy:
        """The policy a new task of `engine` gets when the caller gives none."""
        return default_policy(
            self.defaults(), endpoint=engine_endpoint(engine, self.engine(engine))
        )

    def engine(self, name: str) -> EngineSettings:
        """One engine's settings (binary, version, endpoint, model, key secret)."""
        return EngineSettings.from_dict(self.read().get(ENGINES_SECTION, {}).get(name))
