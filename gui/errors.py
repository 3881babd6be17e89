"""Errors in words: one line fit to show a person, and whether an error is the OS keyring asking
to be unlocked.

Owns the wording only (no Qt), so job results and the Qt-free `data` modules word errors alike.
Every error shown anywhere in the app goes through `describe_error`: the Docker client's own
exceptions ("docker.errors.NotFound: 404 Client Error …") and the HTTP errors beneath them are
never shown as they are, but as what happened to the sandbox and what to do about it.
"""

from __future__ import annotations

import re

from core.errors import CairnError, exception_chain

# What the Docker client's errors look like when they leak into a message as text.
_RAW_DOCKER = re.compile(
    r"docker\.errors|requests\.exceptions|urllib3|\b[45]\d\d (Client|Server) Error\b|"
    r"\bfor url: http\+docker|\bAPIError\b|\bNotFound: 404\b",
    re.IGNORECASE,
)

GONE = (
    "the sandbox's container no longer exists (it was removed outside Cairn); resume the task "
    "to make a new one from its last checkpoint"
)
BUSY = (
    "Docker refused: the sandbox's container is busy (being removed, paused or restarting); "
    "try again in a moment"
)
DAEMON = "Docker failed to carry out the request; check that it runs (docker info) and try again"
UNREACHABLE = "Docker is not answering; check that it runs (docker info)"


def _names(error: BaseException) -> set[str]:
    return {f"{cls.__module__}.{cls.__name__}" for cls in type(error).__mro__}


def _docker_words(chain: list[BaseException]) -> str | None:
    """What a Docker client error in the chain means, in words; None when there is none."""
    for error in chain:
        names = _names(error)
        if "docker.errors.NotFound" in names or "docker.errors.ImageNotFound" in names:
            if "docker.errors.ImageNotFound" in names:
                return (
                    "the sandbox image is missing; pull or build it again (see Settings ▸ Sandbox)"
                )
            return GONE
        if "docker.errors.APIError" in names:
            status = getattr(error, "status_code", None)
            if status == 409:
                return BUSY
            if status == 404:
                return GONE
            return DAEMON
        if (
            any(n.startswith(("requests.exceptions.", "urllib3.exceptions.")) for n in names)
            or "docker.errors.DockerException" in names
        ):
            return UNREACHABLE
    return None


def describe_error(error: BaseException) -> str:
    """One line fit to show a person: Cairn's own message, or the OS's, or the exception's —
    and for anything that came from the Docker client, what it means for the sandbox."""
    chain = exception_chain(error)
    docker_words = _docker_words(chain)
    if isinstance(error, CairnError):
        text = str(error)
        if docker_words and _RAW_DOCKER.search(text):
            return docker_words
        return text if not _RAW_DOCKER.search(text) else DAEMON
    if docker_words:
        return docker_words
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where}"
    lines = str(error).strip().splitlines()
    if lines and _RAW_DOCKER.search(lines[0]):
        return DAEMON
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def describe_text(text: str) -> str:
    """A message that arrived as text (a run's note, a report line): the raw Docker client text
    in it replaced by words."""
    return DAEMON if _RAW_DOCKER.search(text) else text


def is_keyring_problem(error: BaseException) -> bool:
    """Whether the error says the OS keyring is missing or locked (it asks for an unlock prompt)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"KeyringLocked", "KeyringUnavailable"})
