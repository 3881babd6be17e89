"""Errors Cairn reports to people: each carries one clear line.

Owns the exception hierarchy; callers (CLI, GUI) decide how to show it.
"""

from __future__ import annotations


class CairnError(Exception):
    """A failure with a message fit to show a user as it is (one line)."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class InputError(CairnError):
    """The user gave something Cairn cannot use (a file for a folder, a bad id...)."""


class NotFound(CairnError):
    """A task, workspace, revision or snapshot that does not exist."""


class Conflict(CairnError):
    """The operation collides with another one in flight or with the current state."""


class IllegalTransition(CairnError):
    """A lifecycle or run-state change the state machine does not allow."""


class CorruptSnapshot(CairnError):
    """A snapshot whose objects are missing or do not hash to what was recorded."""


class VaultError(CairnError):
    """The vault (Cairn's own git object store) failed or holds something unexpected."""


class QuotaExceeded(CairnError):
    """A workspace grew past its disk quota."""


def exception_chain(exc: BaseException) -> list[BaseException]:
    """The exception and every one behind it (causes, contexts, exceptions carried in args),
    each once: libraries such as docker-py and requests wrap the OS error that says what
    happened several layers down."""
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        stack.extend([e.__cause__, e.__context__])
        stack.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
    return seen
