"""``X-Request-Id``: one id per request, in the access log, to the replica and back.

Only while the service's access log is on (the id is there to find a request's
line): the client's id is kept when it is one plain token
(``^[A-Za-z0-9._:-]{1,128}$``, sent once), otherwise the load balancer makes one
(this process's random prefix and a counter: unique without a syscall per
request). The request head gets it as it leaves for the replica; the response
head gets it on the way back to the client (lb/upstream.py).
"""

from __future__ import annotations

import itertools
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from steadyserve.lb.exchange import Exchange

HEADER = b"x-request-id"
_FIND = b"\r\n" + HEADER + b":"
VALID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_PREFIX = os.urandom(6).hex().encode()
_COUNTER = itertools.count(1)


def made() -> bytes:
    """A new id: ``<12 hex digits of this process>-<counter in hex>``."""
    return b"%s-%x" % (_PREFIX, next(_COUNTER))


def tag(ex: Exchange) -> None:
    """Give ``ex`` its id and make its request head carry exactly that one."""
    head = ex.head
    lower = head.lower()
    at = lower.find(_FIND)
    if at >= 0:
        end = head.find(b"\r\n", at + 2)
        value = head[at + len(_FIND) : end].strip(b" \t")
        if VALID.fullmatch(value) and lower.find(_FIND, end) < 0:
            ex.request_id = value
            return
        kept = [
            line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(HEADER + b":")
        ]
        head = b"\r\n".join(kept) + b"\r\n\r\n"
    rid = ex.request_id = made()
    ex.head = b"%sx-request-id: %s\r\n\r\n" % (head[:-2], rid)


def stamped(response: bytes, rid: bytes) -> bytes:
    """``response`` (starting with its status line) with ``X-Request-Id`` after it."""
    end = response.find(b"\r\n") + 2
    return b"%sx-request-id: %s\r\n%s" % (response[:end], rid, response[end:])
