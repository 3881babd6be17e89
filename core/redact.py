"""Redaction: replaces the secret values this process knows with `[secret:NAME]` in text, bytes,
streams, log records and error messages.

Owns the process-wide registry of values in use and the matching; which values get registered (and
when) is left to core.credentials, and where redaction is applied (run logs, the GUI) to callers.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import AnyStr, Generic
from urllib.parse import quote, quote_plus

# Shorter values would match too much ordinary output ("abc" in every other word) and the noise
# would hide real leaks; they are not registered, so they are NOT redacted.
MIN_SECRET_LENGTH = 4


def placeholder(name: str) -> str:
    return f"[secret:{name}]"


def encodings_of(value: str) -> set[str]:
    """The forms of `value` that are matched: as-is, URL-encoded (path and form style), and base64
    of the value alone (standard and URL-safe alphabets, with and without padding).

    A value base64-encoded together with other bytes (e.g. `user:token` in a Basic auth header) is
    a different string and is not recognised.
    """
    raw = value.encode("utf-8")
    forms = {value, quote(value, safe=""), quote_plus(value, safe="")}
    for encoder in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encoder(raw).decode("ascii")
        forms.update({encoded, encoded.rstrip("=")})
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


@dataclass(frozen=True)
class _Patterns:
    """One compiled snapshot of the registry; replaced whole when the registry changes."""

    text: re.Pattern[str] | None
    data: re.Pattern[bytes] | None
    text_names: dict[str, str]
    data_names: dict[bytes, str]
    max_bytes: int  # longest matched form, in bytes (what a stream must hold back)
    max_chars: int


_EMPTY = _Patterns(None, None, {}, {}, 0, 0)


class Redactor:
    """The secret values in use in this process, and their replacement by `[secret:NAME]`.

    Values shorter than MIN_SECRET_LENGTH (4) characters are ignored by `register`: they would
    produce too many false hits. A name keeps every value registered for it, so output of a process
    started before a rotation is still redacted after it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, str] = {}  # value -> name (the latest name registered for it)
        self._patterns = _EMPTY

    def register(self, name: str, value: str) -> bool:
        """Remember `value` as the secret `name`; False when it is too short to be redacted."""
        if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
            return False
        with self._lock:
            if self._values.get(value) != name:
                self._values[value] = name
                self._patterns = self._compile()
        return True

    def forget(self, name: str) -> None:
        with self._lock:
            self._values = {v: n for v, n in self._values.items() if n != name}
            self._patterns = self._compile()

    def clear(self) -> None:
        with self._lock:
            self._values = {}
            self._patterns = _EMPTY

    def names(self) -> list[str]:
        with self._lock:
            return sorted(set(self._values.values()))

    @property
    def max_secret_bytes(self) -> int:
        """The longest registered form in bytes: a stream holds back one byte less than this."""
        return self._patterns.max_bytes

    def _compile(self) -> _Patterns:
        text_names: dict[str, str] = {}
        for value, name in self._values.items():
            for form in encodings_of(value):
                text_names.setdefault(form, name)
            text_names[value] = name  # the value itself beats a coincidental encoding of another
        if not text_names:
            return _EMPTY
        data_names = {form.encode("utf-8"): name for form, name in text_names.items()}
        # Longest first: at a given position the longest form wins (a value that contains another
        # value, a padded base64 over its unpadded prefix).
        text_forms = sorted(text_names, key=len, reverse=True)
        data_forms = sorted(data_names, key=len, reverse=True)
        return _Patterns(
            text=re.compile("|".join(re.escape(f) for f in text_forms)),
            data=re.compile(b"|".join(re.escape(f) for f in data_forms)),
            text_names=text_names,
            data_names=data_names,
            max_bytes=len(data_forms[0]),
            max_chars=max(len(f) for f in text_forms),
        )

    def redact(self, value: AnyStr) -> AnyStr:
        """`value` (str or bytes) with every registered secret replaced by `[secret:NAME]`."""
        patterns = self._patterns
        if isinstance(value, (bytes, bytearray)):
            if patterns.data is None:
                return value
            names = patterns.data_names
            return patterns.data.sub(lambda m: placeholder(names[m.group(0)]).encode(), value)
        if patterns.text is None:
            return value
        names_t = patterns.text_names
        return patterns.text.sub(lambda m: placeholder(names_t[m.group(0)]), value)

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)


class StreamRedactor(Generic[AnyStr]):
    """Redacts a stream fed in chunks (bytes or str, not mixed), including a secret split across
    chunks: it holds back the last max(len(form)) - 1 bytes (or characters) until more data or
    `flush()` shows whether they start a secret.
    """

    def __init__(self, redactor: Redactor):
        self._redactor = redactor
        self._pending: AnyStr | None = None

    def feed(self, chunk: AnyStr) -> AnyStr:
        """The redacted output that is safe to emit now (possibly empty)."""
        buf = chunk if self._pending is None else self._pending + chunk
        patterns = self._redactor._patterns
        if isinstance(buf, (bytes, bytearray)):
            out, self._pending = _redact_settled(
                buf, patterns.data, patterns.data_names, patterns.max_bytes, str.encode
            )
        else:
            out, self._pending = _redact_settled(
                buf, patterns.text, patterns.text_names, patterns.max_chars, str
            )
        return out

    def flush(self) -> AnyStr | None:
        """The rest of the stream, redacted; None when nothing was ever fed."""
        rest, self._pending = self._pending, None
        if rest is None:
            return None
        return self._redactor.redact(rest)


def _redact_settled(
    buf: AnyStr,
    pattern: re.Pattern[AnyStr] | None,
    names: Mapping[AnyStr, str],
    longest: int,
    label: Callable[[str], AnyStr],
) -> tuple[AnyStr, AnyStr]:
    """`buf` split into its redacted part that is safe to emit now and the rest to hold back.
    Any form starting before the cut lies wholly inside `buf`, so it is matched now; a form
    starting at or after it may continue in the next chunk."""
    if pattern is None:
        return buf, buf[:0]
    cut = max(0, len(buf) - (longest - 1))
    out = []
    pos = 0
    for match in pattern.finditer(buf):
        if match.start() >= cut:
            break
        out.append(buf[pos : match.start()])
        out.append(label(placeholder(names[match.group(0)])))
        pos = match.end()
    end = max(cut, pos)
    out.append(buf[pos:end])
    return buf[:0].join(out), buf[end:]


_REDACTOR = Redactor()


def get_redactor() -> Redactor:
    """The process-wide redactor (credentials register into it; logs and messages read from it)."""
    return _REDACTOR


def redact(value: AnyStr) -> AnyStr:
    return _REDACTOR.redact(value)


def redact_exception(exc: BaseException, redactor: Redactor | None = None) -> str:
    """A message for `exc` fit to show a user: its text (or its type when it has none), redacted."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the original failure
        text = ""
    if not text:
        text = type(exc).__name__
    return (redactor or _REDACTOR).redact(text)


class RedactingFilter(logging.Filter):
    """Redacts a log record in place: its message merged with its args, exception and stack text.

    The message is rendered here (args are dropped afterwards) because an arg's str() — a dict, an
    exception, an environment — can carry a secret that redacting the format string would miss.
    """

    def __init__(self, redactor: Redactor | None = None):
        super().__init__()
        self._redactor = redactor or _REDACTOR

    def filter(self, record: logging.LogRecord) -> bool:
        # The same record can pass the root logger's filter and then a handler's: once is enough
        # (a second pass could rewrite a placeholder that happens to contain a short secret).
        if getattr(record, "_cairn_redacted", False):
            return True
        record._cairn_redacted = True
        r = self._redactor
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: keep everything, redacted
            message = f"{record.msg!s} {record.args!r}"
        record.msg = r.redact(message)
        record.args = None
        if record.exc_info and record.exc_info != (None, None, None):
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info)).rstrip(
                "\n"
            )
            record.exc_text = r.redact(text)
            # Handlers that format exc_info themselves would print the unredacted traceback.
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = r.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = r.redact(record.stack_info)
        return True


def install_log_redaction(
    logger: logging.Logger | None = None, redactor: Redactor | None = None
) -> RedactingFilter:
    """Attach one RedactingFilter to `logger` (the root logger by default) and to its handlers.

    Logger filters see only records logged on that logger; records from child loggers reach the
    root's handlers without passing its filters, hence the handlers too. Handlers added later need
    `handler.addFilter(...)` with the returned filter, or another call. Calling twice adds nothing.
    """
    logger = logger or logging.getLogger()
    existing = next((f for f in logger.filters if isinstance(f, RedactingFilter)), None)
    filt = existing or RedactingFilter(redactor)
    if existing is None:
        logger.addFilter(filt)
    for handler in logger.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(filt)
    return filt
