"""Sandbox policy: what a task's sandbox may reach and use (network, limits, mounts, identity,
secrets), as a versioned value.

Owns the policy's shape, validation and versioning. A resume always applies the current policy;
a checkpoint only records the version it was made under. Enforcement is the backends' job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from core.errors import InputError
from core.sandbox.base import (
    NETWORK_ALLOWLIST,
    NETWORK_MODES,
    NETWORK_NONE,
    NETWORK_OPEN,
    Limits,
)

__all__ = ["NETWORK_ALLOWLIST", "NETWORK_MODES", "NETWORK_NONE", "NETWORK_OPEN", "Limits", "Policy"]


@dataclass(frozen=True)
class Policy:
    version: int = 1
    network: str = NETWORK_NONE
    allow: tuple[str, ...] = ()  # host:port pairs reachable under "allowlist"
    limits: Limits = field(default_factory=Limits)
    mounts: tuple[tuple[str, str], ...] = ()  # extra read-only (host, container) mounts
    secrets: tuple[str, ...] | None = (
        None  # secret names the sandbox may receive; None: all granted
    )
    uid: int | None = None  # sandbox user; None: the backend's non-root default
    approved: tuple[str, ...] = ()  # exact commands a person approved for this task
    # program rules (core/approvals_exec.py) a person approved for this task with "Remember"
    approved_rules: tuple[str, ...] = ()

    def validate(self) -> Policy:
        if self.network not in NETWORK_MODES:
            raise InputError(
                f"unknown network mode {self.network!r} (use one of {', '.join(NETWORK_MODES)})"
            )
        for entry in self.allow:
            host, sep, port = entry.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise InputError(f"an allowlist entry must be host:port, not {entry!r}")
        if self.uid == 0:
            raise InputError("a sandbox never runs as root")
        if not all(isinstance(c, str) for c in self.approved):
            raise InputError("approved commands must be strings")
        if not all(isinstance(c, str) for c in self.approved_rules):
            raise InputError("approved rules must be strings")
        return self

    def allows_secret(self, name: str) -> bool:
        return self.secrets is None or name in self.secrets

    def changed(self, **changes: object) -> Policy:
        """A new version of this policy with `changes` applied."""
        if "limits" in changes and isinstance(changes["limits"], dict):
            changes["limits"] = _limits(replace, self.limits, **changes["limits"])
        for key in ("allow", "secrets", "approved", "approved_rules"):
            if isinstance(changes.get(key), list):
                changes[key] = tuple(changes[key])  # type: ignore[arg-type]
        return replace(self, version=self.version + 1, **changes).validate()  # type: ignore[arg-type]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["allow"] = list(self.allow)
        d["mounts"] = [list(m) for m in self.mounts]
        d["secrets"] = None if self.secrets is None else list(self.secrets)
        d["approved"] = list(self.approved)
        d["approved_rules"] = list(self.approved_rules)
        return d

    @classmethod
    def from_dict(cls, data: dict | None) -> Policy:
        if not data:
            return cls()
        return cls(
            version=int(data.get("version", 1)),
            network=data.get("network", NETWORK_NONE),
            allow=tuple(data.get("allow", ())),
            limits=_limits(Limits, **data.get("limits", {})),
            mounts=tuple((str(m[0]), str(m[1])) for m in data.get("mounts", ())),
            secrets=None if data.get("secrets") is None else tuple(data["secrets"]),
            uid=data.get("uid"),
            approved=tuple(data.get("approved", ())),
            approved_rules=tuple(data.get("approved_rules", ())),
        ).validate()


def _limits(make: Callable[..., Limits], *args: object, **kwargs: object) -> Limits:
    try:
        return make(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise InputError(
            str(exc) if "limits" in str(exc) else f"unusable sandbox limits: {exc}"
        ) from exc
