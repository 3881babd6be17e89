"""Redaction of secret values in text, bytes, streams, log records and user-facing messages."""

import base64
import io
import logging
from urllib.parse import quote, quote_plus

import pytest

from core.redact import (
    MIN_SECRET_LENGTH,
    RedactingFilter,
    Redactor,
    StreamRedactor,
    get_redactor,
    install_log_redaction,
    redact_exception,
)

TOKEN = "sk-live/Ab+cd=ef?g&h 42"  # characters that URL- and base64-encoding both change


@pytest.fixture
def redactor() -> Redactor:
    r = Redactor()
    r.register("API_TOKEN", TOKEN)
    return r


def test_a_value_is_replaced_by_its_name_in_text(redactor):
    assert redactor.redact(f"token={TOKEN}; again {TOKEN}") == (
        "token=[secret:API_TOKEN]; again [secret:API_TOKEN]"
    )


def test_a_value_is_replaced_in_bytes(redactor):
    out = redactor.redact(b"Authorization: Bearer " + TOKEN.encode() + b"\n")
    assert out == b"Authorization: Bearer [secret:API_TOKEN]\n"


def test_non_ascii_values_are_replaced_in_text_and_in_their_utf8_bytes():
    r = Redactor()
    r.register("PW", "pässwörd")
    assert r.redact("x pässwörd y") == "x [secret:PW] y"
    assert r.redact("x pässwörd y".encode()) == b"x [secret:PW] y"


def test_text_without_secrets_is_returned_unchanged(redactor):
    assert redactor.redact("nothing to see") == "nothing to see"
    assert redactor.redact(b"") == b""
    assert Redactor().redact("no secrets registered") == "no secrets registered"


@pytest.mark.parametrize(
    "encoded",
    [
        quote(TOKEN, safe=""),
        quote_plus(TOKEN, safe=""),
        base64.b64encode(TOKEN.encode()).decode(),
        base64.b64encode(TOKEN.encode()).decode().rstrip("="),
        base64.urlsafe_b64encode(TOKEN.encode()).decode(),
    ],
    ids=["url-encoded", "form-encoded", "base64", "base64-unpadded", "base64-urlsafe"],
)
def test_common_encodings_of_a_value_are_replaced(redactor, encoded):
    assert encoded != TOKEN
    assert redactor.redact(f"GET /?t={encoded} HTTP/1.1") == "GET /?t=[secret:API_TOKEN] HTTP/1.1"
    assert redactor.redact(f"<{encoded}>".encode()) == b"<[secret:API_TOKEN]>"


def test_values_shorter_than_four_characters_are_not_registered():
    r = Redactor()
    assert MIN_SECRET_LENGTH == 4
    assert r.register("SHORT", "abc") is False
    assert r.redact("abc abcd") == "abc abcd"
    assert r.register("OK", "abcd") is True
    assert r.redact("abc abcd") == "abc [secret:OK]"


def test_the_longest_value_wins_when_one_secret_contains_another():
    r = Redactor()
    r.register("INNER", "secret-value")
    r.register("OUTER", "my-secret-value-2")
    assert r.redact("a my-secret-value-2 b secret-value") == "a [secret:OUTER] b [secret:INNER]"


def test_a_rotated_secret_keeps_both_values_redacted():
    r = Redactor()
    r.register("KEY", "old-value-1")
    r.register("KEY", "new-value-2")
    assert r.redact("old-value-1 new-value-2") == "[secret:KEY] [secret:KEY]"
    r.forget("KEY")
    assert r.redact("old-value-1") == "old-value-1"


def _stream(redactor: Redactor, data, size: int):
    s = StreamRedactor(redactor)
    parts = [s.feed(data[i : i + size]) for i in range(0, len(data), size)]
    parts.append(s.flush())
    return data[:0].join(parts)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16, 1000])
def test_a_stream_redacts_values_split_across_chunks(redactor, size):
    data = (
        b"start "
        + TOKEN.encode()
        + b" middle "
        + TOKEN.encode()
        + TOKEN.encode()
        + b" "
        + base64.b64encode(TOKEN.encode())
        + b" end"
    )
    expected = redactor.redact(data)
    assert b"[secret:API_TOKEN]" in expected and TOKEN.encode() not in expected
    assert _stream(redactor, data, size) == expected


def test_a_stream_holds_back_only_what_could_start_a_secret(redactor):
    s = redactor.stream()
    assert redactor.max_secret_bytes >= len(TOKEN)
    first = s.feed(b"x" * 100 + TOKEN.encode()[:5])
    # Everything but the last max-1 bytes is emitted at once: a live log does not lag far behind.
    assert first == b"x" * (105 - (redactor.max_secret_bytes - 1))
    second = s.feed(TOKEN.encode()[5:] + b" tail")
    assert first + second + s.flush() == b"x" * 100 + b"[secret:API_TOKEN] tail"


def test_a_stream_of_text_is_redacted_too(redactor):
    expected = "a [secret:API_TOKEN] b [secret:API_TOKEN]"
    assert _stream(redactor, f"a {TOKEN} b {TOKEN}", 4) == expected


def test_a_stream_with_nothing_registered_passes_data_through():
    s = Redactor().stream()
    assert s.feed(b"abc") == b"abc"
    assert s.flush() == b""
    assert Redactor().stream().flush() is None


def test_a_secret_ending_a_stream_is_redacted_by_flush(redactor):
    s = redactor.stream()
    out = s.feed(b"last: " + TOKEN.encode())
    assert TOKEN.encode() not in out
    assert out + s.flush() == b"last: [secret:API_TOKEN]"


def _logger_with_buffer(name: str, filt: logging.Filter | None = None):
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    if filt is not None:
        handler.addFilter(filt)
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, buffer


def test_the_log_filter_redacts_the_message_and_its_args(redactor):
    logger, buffer = _logger_with_buffer("cairn.test.redact.args", RedactingFilter(redactor))
    logger.info("exec env=%s token=%r", {"API_TOKEN": TOKEN}, TOKEN)
    logger.info(f"inline {TOKEN}")
    logger.info("mapping %(t)s", {"t": TOKEN})
    text = buffer.getvalue()
    assert TOKEN not in text and repr(TOKEN) not in text
    assert "exec env={'API_TOKEN': '[secret:API_TOKEN]'} token='[secret:API_TOKEN]'" in text
    assert "inline [secret:API_TOKEN]" in text
    assert "mapping [secret:API_TOKEN]" in text


def test_the_log_filter_redacts_exception_text_and_tracebacks(redactor):
    logger, buffer = _logger_with_buffer("cairn.test.redact.exc", RedactingFilter(redactor))
    try:
        raise RuntimeError(f"upstream refused {TOKEN}")
    except RuntimeError:
        logger.exception("call failed")
    text = buffer.getvalue()
    assert "Traceback" in text and "RuntimeError: upstream refused [secret:API_TOKEN]" in text
    assert TOKEN not in text


def test_a_bad_format_string_is_still_logged_and_redacted(redactor):
    logger, buffer = _logger_with_buffer("cairn.test.redact.bad", RedactingFilter(redactor))
    logger.info("two %s %s", TOKEN)
    assert TOKEN not in buffer.getvalue() and "[secret:API_TOKEN]" in buffer.getvalue()


def test_installing_on_the_root_logger_covers_child_loggers_and_is_idempotent(redactor):
    root = logging.getLogger()
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    old_handlers, old_filters, old_level = root.handlers[:], root.filters[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    try:
        first = install_log_redaction(redactor=redactor)
        again = install_log_redaction(redactor=redactor)
        assert first is again and handler.filters == [first] and root.filters == [first]
        child = logging.getLogger("cairn.test.redact.child")
        child.propagate = True
        child.info("child says %s", TOKEN)
        root.info("root says %s", TOKEN)
    finally:
        root.handlers[:], root.filters[:] = old_handlers, old_filters
        root.setLevel(old_level)
    assert buffer.getvalue().splitlines() == [
        "child says [secret:API_TOKEN]",
        "root says [secret:API_TOKEN]",
    ]


def test_redact_exception_gives_a_safe_user_message(redactor):
    message = redact_exception(ValueError(f"bad key {TOKEN}"), redactor)
    assert message == "bad key [secret:API_TOKEN]"
    assert redact_exception(KeyError(), redactor) == "KeyError"


def test_the_process_wide_redactor_is_shared():
    r = get_redactor()
    assert r is get_redactor()
    r.register("TEST_SHARED_REDACT", "shared-canary-value")
    try:
        message = redact_exception(RuntimeError("x shared-canary-value"))
        assert message == "x [secret:TEST_SHARED_REDACT]"
    finally:
        r.forget("TEST_SHARED_REDACT")
