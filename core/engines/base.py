"""The engine contract: how an engine is launched in a sandbox, resumed, and checked.

Owns the interface only; each engine module implements it for one program.
"""

from __future__ import annotations

import abc
from pathlib import Path
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolContract:
    """What a run relied on inside its sandbox: the image and the versions of its tools."""

    image_digest: str | None
    tools: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"image_digest": self.image_digest, "tools": dict(self.tools)}

    @classmethod
    def from_dict(cls, data: dict | None) -> "ToolContract":
        data = data or {}
        return cls(data.get("image_digest"), dict(data.get("tools") or {}))

    def differences(self, other: "ToolContract") -> list[str]:
        """How `other` (found now) differs from this one (recorded), in words."""
        out = []
        if self.image_digest and other.image_digest and self.image_digest != other.image_digest:
            out.append(f"the sandbox image changed ({self.image_digest[:19]} → "
                       f"{other.image_digest[:19]})")
        for name, version in sorted(self.tools.items()):
            now = other.tools.get(name)
            if now != version:
                out.append(f"{name} was {version!r}, now {now or 'missing'!r}")
        return out


class Engine(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    def launch_argv(self, spec: dict, run_dir_in_sandbox: str, start_step: int) -> list[str]:
        """The command that runs (or continues, from `start_step`) this run inside the sandbox."""

    @abc.abstractmethod
    def prepare(self, spec: dict, host_dir: Path, sandbox_dir: str) -> None:
        """Write what the launch needs into the attempt's folder (`host_dir` on the host, seen
        as `sandbox_dir` inside the sandbox)."""

    def tool_probe(self) -> dict[str, list[str]]:
        """Commands whose first output line is each tool's version, keyed by tool name."""
        return {}

    def validate(self, spec: dict) -> dict:
        return spec
