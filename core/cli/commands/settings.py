"""Settings: `config set|get|unset|show` over settings.json (engines.*, defaults.*, prices.*).

Owns this command's arguments and output; validating and storing settings are the facade's.
"""

from __future__ import annotations

import argparse
import json

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import EXIT_FAILED, emit
from core.errors import CairnError


class ConfigCommand(Command):
    name = "config"
    help = (
        "settings: config set engines.ENGINE.KEY VALUE | set defaults.KEY VALUE "
        "(engine, image, network, allow, backend) | set prices.MODEL "
        "input=USD,output=USD[,cache_read=USD,cache_write=USD] (per million tokens) | "
        "get KEY | unset KEY | show"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["set", "get", "unset", "show"])
        p.add_argument("key", nargs="?")
        p.add_argument("value", nargs="?")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        if args.action == "show":
            if args.key or args.value:
                raise CairnError("config show takes no key")
            data = app.settings.read()
            emit(
                args,
                data,
                lambda: json.dumps(data, indent=2, sort_keys=True) if data else "no settings",
            )
            return
        if not args.key:
            raise CairnError(
                f"config {args.action} needs a KEY, e.g. engines.codex.model or defaults.engine"
            )
        if args.action == "set":
            if args.value is None:
                raise CairnError("config set needs a VALUE: config set KEY VALUE")
            stored = app.settings.set(args.key, args.value)
            emit(args, {"key": args.key, "value": stored}, f"{args.key} = {stored}")
            return
        if args.value is not None:
            raise CairnError(f"config {args.action} takes a KEY only")
        if args.action == "unset":
            removed = app.settings.unset(args.key)
            emit(
                args,
                {"key": args.key, "removed": removed},
                f"{args.key} removed" if removed else f"{args.key} was not set",
            )
            return
        value = app.settings.get(args.key)
        if value is None:
            if args.json:
                emit(args, {"key": args.key, "value": None}, "")
            raise SystemExit(EXIT_FAILED)  # like `git config --get`: unset, nothing printed
        emit(
            args,
            {"key": args.key, "value": value},
            lambda: (
                json.dumps(value, indent=2, sort_keys=True)
                if isinstance(value, dict)
                else str(value)
            ),
        )


COMMANDS: tuple[Command, ...] = (ConfigCommand(),)
