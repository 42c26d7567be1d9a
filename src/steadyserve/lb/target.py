"""Request-target normalisation: one canonical path, checked and forwarded.

A control path (a command replica's ``reconfigure_path``) must be unreachable
however the client spells it: absolute-form (``POST http://x/-/reconfigure``),
percent-encodings (``/-/%72econfigure``, ``/%2e%2e/-/reconfigure``), dot segments,
duplicate slashes or backslashes. So the target is normalised once, the block is
checked on the normalised path, and the replica receives that same origin-form,
never the client's spelling (a replica that resolves ``..`` or ``%2F`` itself
cannot be steered past the check).

Most targets are plain origin-form paths: ``normalise`` returns those unchanged
after a few byte scans (the load balancer's hot path).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

# RFC 3986 unreserved characters: decoding them never changes a URI's meaning.
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_ABSOLUTE = re.compile(rb"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)(.*)$", re.DOTALL)


class BadTarget(ValueError):
    """The request target cannot be forwarded (answered 400)."""


def is_plain(target: bytes) -> bool:
    """Origin-form with nothing to normalise: the fast path."""
    # Runs on every request: a one-byte needle given as an int is a memchr (13 ns),
    # a bytes needle with ``in`` goes through the buffer protocol (90 ns); ``find``
    # parses its arguments from a tuple, where ``partition`` takes its one argument
    # directly (about 500 instructions less, bench/RESULTS.md). "/." is only looked
    # for when there is a dot at all.
    return (
        target[:1] == b"/"
        and 37 not in target  # "%"
        and 92 not in target  # "\\"
        and (46 not in target or b"/." not in target)  # "."
        and not target.partition(b"//")[1]
    )


def normalise(target: bytes, method: bytes) -> tuple[bytes, bytes | None]:
    """(origin-form target to forward, authority of an absolute-form target or None).

    Raises BadTarget for authority-form (only CONNECT uses it, and CONNECT is
    refused), unknown schemes, and anything that is not a path.
    """
    if is_plain(target):
        return target, None
    if target == b"*":
        if method != b"OPTIONS":
            raise BadTarget("'*' is only a target for OPTIONS")
        return target, None
    authority: bytes | None = None
    if target[:1] != b"/":
        match = _ABSOLUTE.match(target)
        if match is None:
            raise BadTarget("request target is neither a path nor an absolute URL")
        scheme = target.split(b":", 1)[0].lower()
        if scheme not in (b"http", b"https"):
            raise BadTarget(f"unsupported scheme {scheme.decode(errors='replace')!r}")
        authority = match.group(1).rsplit(b"@", 1)[-1]  # userinfo is never forwarded
        target = match.group(2)
        if target[:1] != b"/":
            target = b"/" + target  # "http://x" or "http://x?q" means "/" (RFC 9112 3.2.2)
    path, sep, query = target.partition(b"?")
    path = path.split(b"#", 1)[0]
    if sep:
        query = query.split(b"#", 1)[0]
    path = _ESCAPE.sub(_decode_unreserved, path)
    path = _clean_path(path.replace(b"\\", b"/"))
    return (path + b"?" + query if sep else path), authority


def is_blocked(target: bytes, blocked: frozenset[bytes]) -> bool:
    """Could any common server route the (already normalised) ``target`` to one of
    the ``blocked`` paths (lowercase, no trailing slash; see :func:`blocked_key`)?

    A plain path (the hot path) has one reading; anything else is checked under
    every reading :func:`readings` lists. Only the check uses them: what is
    forwarded is the normalised target, unchanged."""
    path = target.partition(b"?")[0]
    if 59 not in path and 35 not in path and path.isascii() and is_plain(path):  # ";" "#"
        return blocked_key(path) in blocked
    return not blocked.isdisjoint(readings(path))


def blocked_key(path: bytes) -> bytes:
    """How a blocked path is compared: lowercase (Express and ASP.NET route without
    regard to case, so every case of a blocked path is refused), no trailing slash."""
    return path.rstrip(b"/").lower() or b"/"


def readings(path: bytes) -> set[bytes]:
    """The paths the servers people put behind SteadyServe may route ``path`` to,
    each as :func:`blocked_key` spells it (docs/security.md has the table):

    - percent-escapes decoded, repeatedly (``%252e``: a double-decoding app), or not;
    - cut at a NUL, ``?`` or ``#`` (a decoded ``%3F``, or a fragment a client sent);
    - ``\\`` read as ``/``; overlong UTF-8 (``%C0%AF``) read as the ASCII it spells;
    - ``;params`` dropped from every segment before dot segments are resolved
      (Tomcat, Spring: ``/..;/`` is ``/../``), from the last segment after
      (Python's ``urlparse``), or kept (most servers), and dropped before decoding
      as well as after (``%3B`` is a ``;`` to some);
    - duplicate slashes merged, dot segments resolved, a trailing slash ignored.
    """
    decoded = _fully_decoded(path)
    stripped_then_decoded = _fully_decoded(_without_params(path))
    out: set[bytes] = set()
    for form in {path, decoded, stripped_then_decoded}:
        form = _cut(_OVERLONG.sub(_ascii_of_overlong, form)).replace(b"\\", b"/")
        out.add(blocked_key(_clean_path(_without_params(form))))  # params, then dots
        cleaned = _clean_path(form)
        out.add(blocked_key(cleaned))  # params kept
        out.add(blocked_key(_without_last_params(cleaned)))  # urlparse: the last one
    return out


def _fully_decoded(path: bytes) -> bytes:
    for _ in range(3):  # double encodings (%252e) as well, bounded
        decoded = unquote_to_bytes(path)
        if decoded == path:
            break
        path = decoded
    return path


def _cut(path: bytes) -> bytes:
    """The path up to a NUL (C strings), ``?`` or ``#`` (decoded ones included)."""
    for stop in (b"\x00", b"?", b"#"):
        path = path.partition(stop)[0]
    return path


def _without_params(path: bytes) -> bytes:
    """``;params`` dropped from every segment (the Servlet spec's path parameters)."""
    if 59 not in path:
        return path
    return b"/".join(segment.partition(b";")[0] for segment in path.split(b"/"))


def _without_last_params(path: bytes) -> bytes:
    """``;params`` dropped from the last segment only, as ``urllib.parse.urlparse``."""
    head, slash, last = path.rpartition(b"/")
    return head + slash + last.partition(b";")[0]


# Overlong UTF-8 for ASCII: two bytes (C0/C1 xx), three (E0 80-81 xx), four (F0 80 80-81 xx).
_OVERLONG = re.compile(
    rb"[\xc0\xc1][\x80-\xbf]|\xe0[\x80\x81][\x80-\xbf]|\xf0\x80[\x80\x81][\x80-\xbf]"
)


def _ascii_of_overlong(match: re.Match[bytes]) -> bytes:
    data = match.group(0)
    value = data[-1] & 0x3F | (data[-2] & 0x3F) << 6
    return bytes((value,)) if value < 0x80 else data


def _decode_unreserved(match: re.Match[bytes]) -> bytes:
    value = int(match.group(1), 16)
    if value in _UNRESERVED:
        return bytes((value,))
    return b"%" + match.group(1).upper()


def _clean_path(path: bytes) -> bytes:
    """Merge duplicate slashes and resolve ``.``/``..`` (RFC 3986 5.2.4); never above ``/``."""
    out: list[bytes] = []
    segments = path.split(b"/")
    for segment in segments[1:]:
        if segment == b"..":
            if out:
                out.pop()
        elif segment and segment != b".":
            out.append(segment)
    trailing = segments[-1] in (b"", b".", b"..") and len(segments) > 1 and bool(out)
    return b"/" + b"/".join(out) + (b"/" if trailing else b"")
