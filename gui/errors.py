"""Errors in words: one line fit to show a person, and whether an error is the OS keyring asking
to be unlocked.

Owns the wording only (no Qt), so job results and the Qt-free `data` modules word errors alike.
"""

from __future__ import annotations

from core.errors import CairnError


def describe_error(error: BaseException) -> str:
    """One line fit to show a person: Cairn's own message, or the OS's, or the exception's."""
    if isinstance(error, CairnError):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where}"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def is_keyring_problem(error: BaseException) -> bool:
    """Whether the error says the OS keyring is missing or locked (it asks for an unlock prompt)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"KeyringLocked", "KeyringUnavailable"})
