"""One cairnctl command: its name, its help, its arguments and what it runs, declared together
in one class, so adding or changing a command touches one module.

Owns the shape of a command; core/cli/commands/ holds the commands, core/cli/__init__.py runs
them.
"""

from __future__ import annotations

import abc
import argparse
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from core.app import Cairn


class Command(abc.ABC):
    name: ClassVar[str]
    """The word after `cairnctl`."""
    help: ClassVar[str]
    """One line for `cairnctl --help`, and the description of `cairnctl NAME --help`."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:  # noqa: B027 - optional
        """The command's own arguments (--data-dir and --json every command takes already)."""

    @abc.abstractmethod
    def run(self, app: Cairn, args: argparse.Namespace) -> None:
        """Carry the command out and print its result (core.cli.output). A CairnError is the
        one-line refusal (exit 2); SystemExit(EXIT_FAILED) is a command that worked and says no."""
