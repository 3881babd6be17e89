"""Sandbox hosts as a service: the hosts a person may choose, testing one, and sending it the
sandbox image from the local Docker engine.

Owns the use cases over core.sandbox.hosts (names and addresses) for the CLI, the first-run
check and Settings; the probing and its words are core.health's, the copying of an image
core.sandbox.docker's, and which host a task's sandbox runs on the sandbox manager's.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.context import Context
from core.errors import InputError
from core.health import Check, check_host
from core.sandbox.base import DEFAULT_IMAGE
from core.sandbox.hosts import LOCAL, SandboxHost
from core.sandboxes import backend_for_host
from core.settings import Settings


class Hosts:
    """The data folder's sandbox hosts: the built-in `local` and `podman` and the settings'
    `hosts.<name>`, the default one, a host's test, and sending it the sandbox image."""

    def __init__(self, ctx: Context, *, settings: Settings, image: str | None = None):
        self._root = ctx.data.root
        self._settings = settings
        self._image = image

    def list(self) -> list[SandboxHost]:
        """Every host, by name."""
        hosts = self._settings.hosts()
        return [hosts[name] for name in sorted(hosts)]

    def default(self) -> SandboxHost:
        """The host new sandboxes go to: CAIRN_HOST, else `defaults.host`, else `local`."""
        return self._settings.host()

    def get(self, name: str | None = None) -> SandboxHost:
        """The host called `name` (the default one without a name); InputError if none is."""
        return self._settings.host(name)

    def image(self) -> str:
        """The sandbox image sandboxes are made from (as the sandbox manager chooses it)."""
        return (
            self._image
            or os.environ.get("CAIRN_SANDBOX_IMAGE")
            or self._settings.defaults().get("image")
            or DEFAULT_IMAGE
        )

    def check(self, name: str | None = None) -> Check:
        """Test one host (the default one without a name): reachable, its API version, the
        sandbox image there, free disk. Waits on the engine for a few seconds at most: call it
        off the GUI thread."""
        return check_host(self.get(name), self.image())

    def send_image(self, name: str) -> str:
        """Send the sandbox image from the local Docker engine to host `name` (docker save |
        docker load over the two engines' APIs; never a registry); the image's id there.
        Minutes for a large image: call it off the GUI thread."""
        target = self.get(name)
        source = self._settings.hosts()[LOCAL]
        if target.engine == source.engine and target.address == source.address:
            raise InputError(
                f"host {target.name} is the local Docker engine itself: the image is built there",
                hint="build it with resources/sandbox/build-image.sh",
            )
        root = Path(self._root)
        sender = backend_for_host(source, root)
        receiver = backend_for_host(target, root)
        try:
            receiver.check()
            return sender.send_image(self.image(), receiver)
        finally:
            sender.close()
            receiver.close()
