"""Sandbox hosts: the engines sandboxes may run on, testing one, and sending it the sandbox image.

Owns these commands' arguments and output; adding a host is `cairnctl config set hosts.<name>
'<engine> <address>'`, the default one `defaults.host`. The probing is core.health's and the
copying core.sandbox.docker's, through the facade's `hosts` service.
"""

from __future__ import annotations

import argparse

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import EXIT_FAILED, emit
from core.errors import CairnError
from core.health import OK, Check


def _check_json(check: Check) -> dict:
    return {
        "state": check.state,
        "detail": check.detail,
        "fix": check.fix,
        "command": check.command,
        "facts": list(check.facts),
        "actions": check.actions(),
    }


class HostCommand(Command):
    name = "host"
    help = (
        "sandbox hosts: host list | check [NAME] (reachable, API version, image, free disk) | "
        "send-image NAME (from the local Docker engine; never a registry)"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["list", "check", "send-image"])
        p.add_argument("host", nargs="?", help="a host's name (check: the default host)")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.action == "list":
            if args.host:
                raise CairnError("host list takes no NAME")
            self.list(app, args)
        elif args.action == "check":
            self.check(app, args)
        else:
            if not args.host:
                raise CairnError("host send-image needs a NAME, e.g. podman")
            self.send_image(app, args)

    def list(self, app: Cairn, args: argparse.Namespace) -> None:
        default = app.hosts.default().name
        hosts = app.hosts.list()
        emit(
            args,
            {
                "default": default,
                "hosts": [
                    {"name": h.name, "engine": h.engine, "address": h.address, "builtin": h.builtin}
                    for h in hosts
                ],
            },
            lambda: "\n".join(
                f"{'*' if h.name == default else ' '} {h.name:<12} {h.engine:<7} {h.address}"
                for h in hosts
            ),
        )

    def check(self, app: Cairn, args: argparse.Namespace) -> None:
        host = app.hosts.get(args.host)
        found = app.hosts.check(host.name)
        lines = [f"{found.title}: {found.detail}", *(f"  {f}" for f in found.facts)]
        if found.fix:
            lines.append(f"  fix: {found.fix}")
        emit(args, {"host": host.name, **_check_json(found)}, "\n".join(lines))
        if found.state != OK and not args.json:
            raise SystemExit(EXIT_FAILED)

    def send_image(self, app: Cairn, args: argparse.Namespace) -> None:
        host = app.hosts.get(args.host)
        image = app.hosts.image()
        image_id = app.hosts.send_image(host.name)
        emit(
            args,
            {"host": host.name, "image": image, "id": image_id},
            f"sent {image} to host {host.name} ({image_id[:19]})",
        )


COMMANDS: tuple[Command, ...] = (HostCommand(),)
