"""The example request shown beside a differing path, with its secrets masked.

``steady status`` shows one request per differing path, so a user can replay it;
the example is the method and the target only (never a header or a body), and the
value of every query parameter whose name looks like a credential (``token``,
``api_key``, ``sig``...) is replaced by ``***``, as are path segments that look like
bearer tokens (long runs of letters and digits). An example is also cut to
``MAX_EXAMPLE`` characters.
"""

from __future__ import annotations

import re

MAX_EXAMPLE = 200
MASK = "***"
_SECRET_NAME = re.compile(
    r"(token|key|secret|passw|pwd|auth|sig|session|cookie|credential|code|jwt|bearer)",
    re.IGNORECASE,
)
# A path segment of 24 or more token characters: an API key, a JWT, a signed id.
_LONG_SEGMENT = re.compile(r"(?<=/)[A-Za-z0-9_\-.~%+=]{24,}(?=/|$)")


def masked(method: str, target: str) -> str:
    """``GET /x?token=abc&page=2`` -> ``GET /x?token=***&page=2`` (cut to MAX_EXAMPLE)."""
    path, sep, query = target.partition("?")
    path = _LONG_SEGMENT.sub(MASK, path)
    if sep:
        parts = []
        for item in query.split("&"):
            name, eq, _ = item.partition("=")
            if eq and _SECRET_NAME.search(name):
                parts.append(f"{name}={MASK}")
            elif not eq and _SECRET_NAME.search(name) is None and len(name) >= 24:
                parts.append(MASK)
            else:
                parts.append(item)
        path = f"{path}?{'&'.join(parts)}"
    text = f"{method} {path}"
    clean = "".join(ch if ch.isprintable() else "?" for ch in text)
    return clean if len(clean) <= MAX_EXAMPLE else clean[: MAX_EXAMPLE - 3] + "..."
