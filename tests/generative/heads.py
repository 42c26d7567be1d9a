"""Generated request heads for the differential test against h11: plain requests
with a few quirks applied, each quirk saying how the load balancer is expected to
differ from h11 on it, and why (the RFC that lets it).

Shared by tests/generative/test_request_head_h11.py (a bounded run) and
bench/generative_long.py (a long one).

A quirk's ``kind``:

* ``SAME``: odd but read alike by both (a disagreement is a finding);
* ``BOTH_REFUSE``: malformed for both parsers (h11 and the load balancer refuse it);
* ``STRICTER``: the load balancer refuses what h11 accepts, on purpose;
* ``LAXER``: the load balancer serves what h11 refuses, and what it forwards is
  unambiguous (the test parses the forwarded bytes with h11 too).

The differential test allows a disagreement only when a quirk of that kind is in
the request; anything else is a finding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

from hypothesis import strategies as st

Kind = Literal["SAME", "BOTH_REFUSE", "STRICTER", "LAXER"]


@dataclass(frozen=True)
class Quirk:
    name: str
    kind: Kind
    why: str


QUIRKS: dict[str, Quirk] = {
    q.name: q
    for q in (
        # -- refused here, accepted by h11 ------------------------------------------
        Quirk(
            "obs_fold",
            "STRICTER",
            "RFC 9112 5.2: a server MUST either reject obs-fold with 400 or unfold it; "
            "refusing keeps a folded value from meaning two things to two parsers",
        ),
        Quirk(
            "bare_lf",
            "STRICTER",
            "RFC 9112 2.2: a recipient MAY take a bare LF as a line end; refusing it "
            "removes a classic smuggling lever (a front that splits only on CRLF)",
        ),
        Quirk(
            "content_length_twice",
            "STRICTER",
            "RFC 9112 6.3 (5): a recipient MUST reject duplicated Content-Length values "
            "or collapse them; the load balancer (llhttp) rejects",
        ),
        Quirk(
            "content_length_list",
            "STRICTER",
            "RFC 9112 6.3 (5): a list of equal Content-Length values, as above",
        ),
        Quirk(
            "length_and_chunked",
            "STRICTER",
            "RFC 9112 6.1: a server MAY reject a request with both Content-Length and "
            "Transfer-Encoding; it is the shape of CL.TE/TE.CL smuggling",
        ),
        Quirk(
            "unknown_method",
            "STRICTER",
            "RFC 9110 9.1: a server SHOULD answer an unrecognised method with 501; "
            "llhttp knows a fixed table of methods (and they are case-sensitive)",
        ),
        Quirk(
            "del_in_value",
            "STRICTER",
            "RFC 9110 5.5: field-vchar is VCHAR / obs-text; DEL (0x7f) is neither, "
            "h11 lets it through",
        ),
        Quirk(
            "other_major_version",
            "STRICTER",
            "RFC 9110 2.5 and 15.6.6: 505 for a major version the server does not speak "
            "in this syntax; h11 reads any digit.digit as HTTP/1 (0.9 and 2.0 too)",
        ),
        Quirk(
            "future_minor_version",
            "STRICTER",
            "RFC 9110 2.5: a recipient SHOULD read HTTP/1.2 as HTTP/1.1; llhttp refuses "
            "every version but 0.9, 1.0, 1.1 and 2.0, and no HTTP/1.2 client exists",
        ),
        Quirk(
            "tab_after_chunked",
            "STRICTER",
            "RFC 9110 5.5: a trailing HTAB is OWS, not part of the value; llhttp takes "
            "'chunked<HTAB>' for another coding and refuses the head (a trailing SP it "
            "strips). Refusing leaves nothing ambiguous",
        ),
        Quirk(
            "chunk_size_space",
            "STRICTER",
            "RFC 9112 7.1: chunk = chunk-size [ chunk-ext ] CRLF; whitespace after the "
            "size without a ';' is outside the grammar",
        ),
        Quirk(
            "huge_value",
            "STRICTER",
            "RFC 6585 5: a head over the server's limit gets 431; h11 applies its limit "
            "only to a head still incomplete in its buffer, not to one read whole",
        ),
        # -- served here, refused by h11 --------------------------------------------
        Quirk(
            "coding_before_chunked",
            "LAXER",
            "RFC 9112 6.1 and 7: codings may precede the final chunked; h11 implements "
            "only chunked. The body is framed by chunked on both sides, and the codings "
            "are forwarded for the replica to decode",
        ),
        Quirk(
            "chunked_list_spelling",
            "LAXER",
            "RFC 9110 5.6.1: a recipient MUST ignore empty list elements; h11 refuses "
            "', chunked'. The load balancer forwards the codings without them, so the "
            "replica finds chunked where it looks",
        ),
        Quirk(
            "request_line_spaces",
            "LAXER",
            "RFC 9112 3: a recipient MAY parse the request line on whitespace "
            "boundaries; the forwarded line is rebuilt with single spaces",
        ),
        Quirk(
            "leading_empty_line",
            "LAXER",
            "RFC 9112 2.2: a server SHOULD ignore at least one empty line before the request line",
        ),
        # -- read alike by both -------------------------------------------------------
        Quirk("body_past_length", "SAME", "bytes past Content-Length start the next request"),
        Quirk(
            "connection_option",
            "SAME",
            "RFC 9110 7.6.1: a proxy removes the fields Connection names (compared so)",
        ),
        Quirk(
            "expect_continue",
            "SAME",
            "RFC 9110 10.1.1: the load balancer reads the body first, so it answers "
            "100-continue itself and does not forward Expect (compared so)",
        ),
        Quirk(
            "forwarded_for",
            "SAME",
            "the load balancer appends the client's address to X-Forwarded-For (compared so)",
        ),
        Quirk("chunk_extension", "SAME", "RFC 9112 7.1.1: extensions are ignored"),
        Quirk("odd_case_names", "SAME", "RFC 9110 5.1: field names are case-insensitive"),
        Quirk("value_whitespace", "SAME", "RFC 9110 5.5: OWS around a value is not part of it"),
        Quirk("empty_host", "SAME", "RFC 9112 3.2: an empty Host is allowed"),
        Quirk("absolute_form", "SAME", "RFC 9112 3.2.2: the target's authority is the host"),
        Quirk("tab_in_request_line", "BOTH_REFUSE", "RFC 9112 3: SP separates"),
        Quirk("fragment_in_target", "SAME", "RFC 9112 3.2: no fragment in a target"),
        # -- refused by both ----------------------------------------------------------
        Quirk("space_before_colon", "BOTH_REFUSE", "RFC 9112 5.1: MUST reject with 400"),
        Quirk("control_in_name", "BOTH_REFUSE", "RFC 9110 5.1: a field name is a token"),
        Quirk("nul_in_value", "BOTH_REFUSE", "RFC 9110 5.5: NUL MUST be rejected"),
        Quirk("cr_in_value", "BOTH_REFUSE", "RFC 9110 5.5: a bare CR MUST be rejected"),
        Quirk("content_length_conflict", "BOTH_REFUSE", "RFC 9112 6.3 (5)"),
        Quirk("content_length_bad", "BOTH_REFUSE", "RFC 9110 8.6: 1*DIGIT"),
        Quirk("chunked_not_final", "BOTH_REFUSE", "RFC 9112 6.3 (4): MUST respond 400"),
        Quirk(
            "transfer_encoding_twice",
            "BOTH_REFUSE",
            "h11 refuses a second line; the load balancer too (it forwards only one)",
        ),
        Quirk("bad_version", "BOTH_REFUSE", "RFC 9112 2.3: HTTP/DIGIT.DIGIT"),
        Quirk("no_host", "BOTH_REFUSE", "RFC 9112 3.2: HTTP/1.1 needs one Host"),
        Quirk("two_hosts", "BOTH_REFUSE", "RFC 9112 3.2: exactly one Host"),
        Quirk("bad_chunk_size", "BOTH_REFUSE", "RFC 9112 7.1: chunk-size is 1*HEXDIG"),
    )
}


@dataclass
class Request:
    """One request of a generated connection, before it is written as bytes."""

    method: bytes = b"GET"
    target: bytes = b"/"
    version: bytes = b"1.1"
    host: list[bytes] = field(default_factory=lambda: [b"h"])
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes | None = None  # None: no body
    chunked: list[bytes] | None = None  # the body's chunks, when chunked
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    close: bool = False  # Connection: close
    keep_alive: bool = False  # Connection: keep-alive (HTTP/1.0)
    quirks: tuple[str, ...] = ()


# What each quirk does, applied while the request is written.
def write(req: Request) -> bytes:
    """The request's bytes, its quirks applied."""
    q = set(req.quirks)
    sp = b"  " if "request_line_spaces" in q else b" "
    if "tab_in_request_line" in q:
        sp = b"\t"
    target = req.target
    if "absolute_form" in q:
        target = b"http://h" + target
    if "fragment_in_target" in q:
        target += b"#frag"
    method = b"FROB" if "unknown_method" in q else req.method
    version = b"HTTP/" + req.version
    lines: list[bytes] = [method + sp + target + b" " + version]
    host_value = b"" if "empty_host" in q else None
    fields: list[tuple[bytes, bytes]] = [
        (b"Host", h if host_value is None else host_value) for h in req.host
    ]
    fields += req.headers
    if "connection_option" in q:
        fields.append((b"X-Hop", b"1"))
        fields.append((b"Connection", b"x-hop"))
    if "expect_continue" in q:
        fields.append((b"Expect", b"100-continue"))
    if "forwarded_for" in q:
        fields.append((b"X-Forwarded-For", b"192.0.2.1"))
    if req.close:
        fields.append((b"Connection", b"close"))
    elif req.keep_alive:
        fields.append((b"Connection", b"keep-alive"))
    body = b""
    if req.chunked is not None:
        te = b"chunked"
        if "coding_before_chunked" in q:
            te = b"gzip, chunked"
        if "tab_after_chunked" in q:
            te += b"\t"
        if "chunked_list_spelling" in q:
            te = b", " + te
        if "chunked_not_final" in q:
            te = b"chunked, gzip"
        fields.append((b"Transfer-Encoding", te))
        if "transfer_encoding_twice" in q:
            fields[-1] = (b"Transfer-Encoding", b"gzip")
            fields.append((b"Transfer-Encoding", te))
        if "length_and_chunked" in q:
            fields.append((b"Content-Length", b"%d" % len(b"".join(req.chunked))))
        size_end = b" " if "chunk_size_space" in q else b""
        for chunk in req.chunked:
            size = b"%x" % len(chunk)
            if "bad_chunk_size" in q:
                size = b"0x" + size
            ext = b";a=b" if "chunk_extension" in q else b""
            body += size + size_end + ext + b"\r\n" + chunk + b"\r\n"
        body += b"0\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in req.trailers) + b"\r\n"
    elif req.body is not None:
        length = b"%d" % len(req.body)
        if "content_length_list" in q:
            length = length + b", " + length
        if "content_length_bad" in q:
            length = b"+" + length
        fields.append((b"Content-Length", length))
        if "content_length_twice" in q:
            fields.append((b"Content-Length", b"%d" % len(req.body)))
        if "content_length_conflict" in q:
            fields.append((b"Content-Length", b"%d" % (len(req.body) + 1)))
        body = req.body
        if "body_past_length" in q:
            body += b"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n"
    if "odd_case_names" in q:
        fields = [(n.upper() if i % 2 else n.lower(), v) for i, (n, v) in enumerate(fields)]
    if "value_whitespace" in q:
        fields = [(n, b" \t" + v + b"  ") for n, v in fields]
    # Quirks on the fields: always on the last generated field (there is at least Host
    # or a framing field to carry them: the strategy makes sure).
    if fields:
        name, value = fields[-1]
        if "space_before_colon" in q:
            name += b" "
        if "control_in_name" in q:
            name += b"\x01"
        if "nul_in_value" in q:
            value += b"\x00x"
        if "cr_in_value" in q:
            value += b"\rx"
        if "del_in_value" in q:
            value += b"\x7fx"
        if "obs_fold" in q:
            value += b"\r\n folded"
        if "huge_value" in q:
            value += b"v" * HUGE
        fields[-1] = (name, value)
    lines += [n + b": " + v for n, v in fields]
    ends = [b"\r\n"] * (len(lines) + 1)
    if "bare_lf" in q:
        ends[len(lines) // 2] = b"\n"
    head = b"".join(line + end for line, end in zip([*lines, b""], ends, strict=True))
    if "leading_empty_line" in q:
        head = b"\r\n" + head
    return head + body


def codings(req: Request) -> bytes:
    """The Transfer-Encoding ``write`` gives a chunked request, as a list without
    empty elements or the whitespace around them."""
    head = write(req).split(b"\r\n\r\n", 1)[0]
    values = re.findall(rb"(?i)\ntransfer-encoding:([^\r\n]*)", head)
    items = [c.strip(b" \t") for v in values for c in v.split(b",")]
    return b", ".join(c for c in items if c)


# A value over the head limit the test gives both parsers (LIMIT).
LIMIT = 8192
HUGE = 2 * LIMIT

_token = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_!#$%&'*+.^`|~",
    min_size=1,
    max_size=12,
).map(str.encode)
# field-vchar, with SP and HTAB inside (never at either end: OWS is not part of a value)
_vchar = "".join(chr(c) for c in range(0x21, 0x7F))
_value = st.builds(
    lambda a, mid, b: (a + mid + b) if mid else a,
    st.text(alphabet=_vchar, min_size=1, max_size=8),
    st.text(alphabet=_vchar + " \t", max_size=10),
    st.text(alphabet=_vchar, min_size=1, max_size=4),
).map(lambda s: s.encode())
_obs_text = st.binary(min_size=1, max_size=4).map(lambda b: bytes(0x80 | x for x in b))

# Names the proxy treats specially are left to the quirks and the framing fields.
_SPECIAL = {
    b"host",
    b"content-length",
    b"transfer-encoding",
    b"connection",
    b"keep-alive",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"upgrade",
    b"expect",
    b"x-forwarded-for",
    b"x-steady-version",
    b"authorization",
}
_header = st.tuples(
    _token.filter(lambda n: n.lower() not in _SPECIAL),
    st.one_of(_value, _value.map(lambda v: v + b"\x80\xff"), _obs_text.map(lambda v: b"x" + v)),
)
_chunks = st.lists(st.binary(min_size=1, max_size=20), min_size=0, max_size=3)


@st.composite
def requests(draw: st.DrawFn, quirky: bool = True) -> Request:
    """One request: plain, or with up to two quirks that fit it."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH", b"OPTIONS"]))
    target = draw(st.sampled_from([b"/", b"/a", b"/a/b?c=d&e", b"/x-y_z.txt", b"/v1/models"]))
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0"]))
    framing = draw(st.sampled_from(["none", "length", "chunked"]))
    req = Request(method=method, target=target, version=version)
    req.headers = draw(st.lists(_header, max_size=4))
    if framing == "length":
        req.body = draw(st.binary(max_size=40))
    elif framing == "chunked":
        req.chunked = draw(_chunks)
        req.trailers = draw(st.lists(_header, max_size=2))
    if version == b"1.0":
        req.host = draw(st.sampled_from([[], [b"h"]]))
        req.keep_alive = draw(st.booleans())
    else:
        req.close = draw(st.booleans())
    if not quirky:
        return req
    fits = [name for name in QUIRKS if _fits(name, req)]
    chosen = draw(st.lists(st.sampled_from(fits), max_size=2, unique=True))
    for name in chosen:
        req = _prepare(name, req, draw)
    return replace(req, quirks=tuple(chosen))


def _fits(name: str, req: Request) -> bool:
    if name in ("content_length_twice", "content_length_list", "content_length_conflict"):
        return req.body is not None
    if name == "content_length_bad":
        return req.body is not None
    if name in (
        "length_and_chunked",
        "coding_before_chunked",
        "chunked_not_final",
        "transfer_encoding_twice",
        "chunked_list_spelling",
        "tab_after_chunked",
    ):
        return req.chunked is not None
    if name == "body_past_length":
        return req.body is not None
    if name in ("chunk_size_space", "bad_chunk_size", "chunk_extension"):
        return bool(req.chunked)
    if name in ("no_host", "two_hosts", "future_minor_version"):
        return req.version == b"1.1"
    return True


def _prepare(name: str, req: Request, draw: st.DrawFn) -> Request:
    """The structural quirks, done on the request (the rest are done by ``write``)."""
    if name == "no_host":
        return replace(req, host=[])
    if name == "two_hosts":
        return replace(req, host=[*req.host, b"g"])
    if name == "bad_version":
        return replace(req, version=draw(st.sampled_from([b"11", b"1.x", b"1.", b"1.1.1"])))
    if name == "other_major_version":
        return replace(req, version=draw(st.sampled_from([b"2.0", b"0.9", b"3.1"])))
    if name == "future_minor_version":
        return replace(req, version=b"1.2")
    return req
