"""Credentials: secrets in the OS keyring, and granting them to a task's lineage.

Owns these commands' arguments and output; values are read from stdin and never printed, and
the keyring and grants are the facade's.
"""

from __future__ import annotations

import argparse
import sys

from core.app import Cairn
from core.cli.command import Command
from core.cli.output import emit
from core.errors import CairnError


class SecretCommand(Command):
    name = "secret"
    help = "keep a secret in the OS keyring (the value is read from stdin)"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["set", "rm", "list"])
        p.add_argument("name", nargs="?")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        secrets = app.credentials.secrets
        if args.action == "list":
            names = secrets.names()
            emit(args, {"secrets": names}, "\n".join(names) or "no secrets")
            return
        if not args.name:
            raise CairnError(f"secret {args.action} needs a NAME")
        if args.action == "set":
            value = sys.stdin.read().rstrip("\n")
            if not value:
                raise CairnError(
                    "no value on stdin (pipe the secret in: ... | cairnctl secret set NAME)"
                )
            secrets.set(args.name, value)
            emit(
                args,
                {"secret": args.name, "set": True},
                f"secret {args.name} stored in the keyring",
            )
        else:
            secrets.delete(args.name)
            emit(args, {"secret": args.name, "removed": True}, f"secret {args.name} removed")


class GrantCommand(Command):
    name = "grant"
    help = "give a task's lineage a keyring secret as an environment variable"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("name")
        p.add_argument("--env", required=True, dest="env_var")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        task = app.tasks.get(args.task)
        grant = app.credentials.grant(task.id, args.name, args.env_var)
        emit(
            args,
            {"grant_id": grant.id, "task_id": task.id, "secret": args.name, "env": args.env_var},
            f"{args.name} → ${args.env_var} for {task.id} and its descendants",
        )


class RevokeCommand(Command):
    name = "revoke"
    help = "take a secret back from a task's lineage"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        p.add_argument("task")
        p.add_argument("name")

    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        task = app.tasks.get(args.task)
        revoked = app.credentials.revoke(task.id, args.name)
        emit(
            args,
            {"task_id": task.id, "secret": args.name, "revoked": len(revoked)},
            f"{args.name} revoked for {task.id}",
        )


COMMANDS: tuple[Command, ...] = (SecretCommand(), GrantCommand(), RevokeCommand())
