"""Destination matching for the egress proxy: what a host:port normalises to, and which spellings
of an address match (or fail to match) an allowlist entry."""

from __future__ import annotations

import pytest

from core.sandbox.egress import (
    Allowlist,
    Destination,
    DestinationError,
    ProxyRequestError,
    normalize_host,
    parse_destination,
    parse_proxy_request,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("api.example.com", "api.example.com"),
        ("API.Example.COM", "api.example.com"),
        ("api.example.com.", "api.example.com"),
        ("LOCALHOST", "localhost"),
        ("host_with_underscore.internal", "host_with_underscore.internal"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0X7F000001", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0177.0.0.01", "127.0.0.1"),
        ("0x7f.0x0.0x0.0x1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("[::1]", "::1"),
        ("[0:0:0:0:0:0:0:1]", "::1"),
        ("[::ffff:127.0.0.1]", "127.0.0.1"),
        ("[::FFFF:7f00:1]", "127.0.0.1"),
        ("[2001:DB8::1]", "2001:db8::1"),
        ("::1", "::1"),
    ],
)
def test_hosts_normalise_to_what_a_resolver_would_reach(raw: str, expected: str) -> None:
    assert normalize_host(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "127.0.0.256",
        "256.0.0.1",
        "1.2.3.4.5",
        "127.0.0.1 ",
        " 127.0.0.1",
        "127.0.0.1\x00.evil.com",
        "127..1",
        "08.0.0.1",  # not octal, not decimal: a resolver's guess is not ours to make
        "0x",
        "0xg1",
        "foo.123",
        "exa mple.com",
        "-leading.example.com",
        "trailing-.example.com",
        "a..b",
        ".",
        "a" * 64 + ".com",
        "bücher.example",
        "１２７.0.0.1",
        "[127.0.0.1]",
        "[::1",
        "::1]",
        "[fe80::1%eth0]",
        "[::1]x",
        "user@example.com",
        "example.com/path",
    ],
)
def test_malformed_or_ambiguous_hosts_are_refused(raw: str) -> None:
    with pytest.raises(DestinationError):
        normalize_host(raw)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api.example.com:443", Destination("api.example.com", 443)),
        ("API.example.com.:0443", Destination("api.example.com", 443)),
        ("127.1:8080", Destination("127.0.0.1", 8080)),
        ("[::1]:8080", Destination("::1", 8080)),
        ("[::ffff:127.0.0.1]:80", Destination("127.0.0.1", 80)),
    ],
)
def test_destinations_parse_to_a_normalised_pair(text: str, expected: Destination) -> None:
    assert parse_destination(text) == expected


@pytest.mark.parametrize(
    "text",
    ["example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:+80", "example.com:8o",
     "example.com:80:81", "::1:80", "[::1]", "[::1]80", ":80", "example.com: 80", "example.com:123456"],
)  # fmt: skip
def test_malformed_destinations_are_refused(text: str) -> None:
    with pytest.raises(DestinationError):
        parse_destination(text)


def test_default_port_applies_only_when_none_is_written() -> None:
    assert parse_destination("example.com", default_port=80) == Destination("example.com", 80)
    assert parse_destination("[::1]", default_port=80) == Destination("::1", 80)
    assert parse_destination("example.com:8080", default_port=80) == Destination(
        "example.com", 8080
    )


def test_destination_prints_ipv6_in_brackets() -> None:
    assert str(Destination("::1", 80)) == "[::1]:80"
    assert str(Destination("example.com", 443)) == "example.com:443"


@pytest.fixture
def allowlist() -> Allowlist:
    return Allowlist(["API.example.com:443", "127.0.0.1:8080", "[::1]:9000"])


@pytest.mark.parametrize(
    "requested",
    ["api.example.com:443", "API.EXAMPLE.COM.:443", "127.0.0.1:8080", "127.1:8080", "0x7f000001:8080",
     "2130706433:8080", "[::ffff:127.0.0.1]:8080", "[::1]:9000", "[0::1]:9000"],
)  # fmt: skip
def test_spellings_of_an_allowed_pair_match(allowlist: Allowlist, requested: str) -> None:
    assert allowlist.allows(parse_destination(requested))


@pytest.mark.parametrize(
    "requested",
    [
        "api.example.com:80",  # same host, other port
        "127.0.0.1:8081",
        "127.0.0.2:8080",  # same network, other address
        "localhost:8080",  # a name is not its address: the pair is checked as given
        "[::1]:8080",  # IPv6 loopback is not IPv4 loopback
        "[::127.0.0.1]:8080",  # IPv4-compatible (not mapped) is another address
        "0.0.0.0:8080",  # reaches local services on Linux; never matches an entry
        "0:8080",
        "example.com:443",
        "evil.api.example.com:443",  # no suffix matching
        "api.example.com.evil.com:443",
    ],
)
def test_other_pairs_do_not_match(allowlist: Allowlist, requested: str) -> None:
    assert not allowlist.allows(parse_destination(requested))


def test_allowlist_refuses_entries_that_mean_any_address() -> None:
    for entry in ("0.0.0.0:80", "0:80", "[::]:80"):
        with pytest.raises(DestinationError):
            Allowlist([entry])


def test_allowlist_refuses_malformed_entries_and_a_bare_string() -> None:
    with pytest.raises(DestinationError):
        Allowlist(["example.com"])
    with pytest.raises(TypeError):
        Allowlist("example.com:443")  # type: ignore[arg-type]


def test_allowlist_entries_are_normalised_and_sorted() -> None:
    assert Allowlist(["B.example:1", "a.example:2", "127.1:3", "a.example:2"]).entries == [
        "127.0.0.1:3",
        "a.example:2",
        "b.example:1",
    ]


def test_an_empty_allowlist_allows_nothing() -> None:
    assert not Allowlist().allows(Destination("127.0.0.1", 80))


# --- Proxy requests: the destination comes from the request line, checked the same way ----------


def test_connect_names_its_destination() -> None:
    request = parse_proxy_request(
        b"CONNECT API.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n"
    )
    assert request.kind == "connect"
    assert request.destination == Destination("api.example.com", 443)
    assert request.requested == "API.example.com:443"


def test_absolute_form_request_is_rewritten_for_one_destination() -> None:
    request = parse_proxy_request(
        b"GET http://127.1:8080/v1/models?x=1 HTTP/1.1\r\n"
        b"Host: other-site.example\r\n"
        b"Proxy-Connection: keep-alive\r\n"
        b"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
        b"Connection: keep-alive, X-Private\r\n"
        b"X-Private: 1\r\n"
        b"Accept: */*\r\n\r\n"
    )
    assert request.kind == "http"
    assert request.destination == Destination("127.0.0.1", 8080)
    lines = request.head.decode("ascii").split("\r\n")
    assert lines[0] == "GET /v1/models?x=1 HTTP/1.1"
    assert lines[1] == "Host: 127.1:8080"  # the URL's authority, whatever Host the client sent
    assert "Accept: */*" in lines and not any("other-site" in line for line in lines)
    assert lines[-3:] == ["Connection: close", "", ""]
    assert not any(
        line.lower().startswith(("proxy-", "x-private", "connection: keep")) for line in lines
    )


def test_absolute_form_without_port_or_path_or_host_header() -> None:
    request = parse_proxy_request(b"GET http://Example.com HTTP/1.0\r\n\r\n")
    assert request.destination == Destination("example.com", 80)
    assert request.head.startswith(b"GET / HTTP/1.0\r\nHost: Example.com\r\n")


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",  # origin form: not a proxy request
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",  # TLS goes through CONNECT
        b"GET http://allowed.example@evil.example/ HTTP/1.1\r\n\r\n",  # userinfo hides the real host
        b"CONNECT example.com HTTP/1.1\r\n\r\n",  # CONNECT needs a port
        b"CONNECT http://example.com:443/ HTTP/1.1\r\n\r\n",
        b"GET http://127.0.0.1 :80/ HTTP/1.1\r\n\r\n",
        b"GET http://exa\xc3\xa4mple.com/ HTTP/1.1\r\n\r\n",
        b"GET  http://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://example.com/ SPDY/3\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\n folded: header\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nno-colon\r\n\r\n",
        b"\r\n\r\n",
    ],
)
def test_malformed_proxy_requests_are_refused(head: bytes) -> None:
    with pytest.raises(ProxyRequestError):
        parse_proxy_request(head)
