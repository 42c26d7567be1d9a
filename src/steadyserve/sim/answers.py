"""What a simulated replica answers, so that the real shadow comparison has answers to
compare and the real canary analysis has errors to count.

A version's nature is written in its ``run`` command (``serve --v3 --differ=60
--noisy --errors=20``), so it travels with the version as the controller keeps it:
a rollback brings the old nature back, an in-place change (same ``run``) keeps it.

Request ``k`` (``GET /items/k``) is answered with a JSON body that is a function of
the version's nature and ``k`` alone, except for ``$.at`` (a noisy version's per-replica
answer count, the field two answers of the same version differ in, as a timestamp
would): ``differ`` percent of the requests get another ``$.value``, ``errors``
percent a 500. Which requests is a fixed scramble of ``k`` (``k * 37 mod 100``), so
any hundred consecutive requests hold exactly that share, and a mirrored share of
them (every second, every tenth...) nearly so: a verdict on a few dozen compared
answers sees the drawn share, not luck.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from steadyserve.core.shadow.compare import Answer, ignored

if TYPE_CHECKING:
    from steadyserve.sim.clock import FakeClock
    from steadyserve.sim.world import SimBackend

PATH = "/items/"
NOISE_PATH = "$.at"
_FLAG = re.compile(r"--(v|differ=|errors=)(\d+)|--(noisy)\b")
_TARGET = re.compile(rb"^[A-Z]+ " + PATH.encode() + rb"(\d+) ")
_JSON = {"content-type": "application/json"}
_ERROR_BODY = b'{"error":"simulated"}'


@dataclass(frozen=True)
class Nature:
    """How one version answers (parsed from and written into its ``run``)."""

    tag: int = 0
    """The ``--vN`` of its command: a differing version's other value is its own."""
    differ: int = 0
    """Percent of the requests answered with another ``$.value`` than tag 0's."""
    noisy: bool = False
    """Its answers carry ``$.at``, which differs between any two of its answers."""
    errors: int = 0
    """Percent of the requests answered 500."""

    @classmethod
    def of(cls, run: str) -> Nature:
        tag = differ = errors = 0
        noisy = False
        for flag, number, word in _FLAG.findall(run):
            if word:
                noisy = True
            elif flag == "v":
                tag = int(number)
            elif flag == "differ=":
                differ = int(number)
            else:
                errors = int(number)
        return cls(tag, differ, noisy, errors)

    def run(self) -> str:
        """The ``run`` command that carries this nature."""
        flags = [f"serve --v{self.tag}"]
        if self.differ:
            flags.append(f"--differ={self.differ}")
        if self.noisy:
            flags.append("--noisy")
        if self.errors:
            flags.append(f"--errors={self.errors}")
        return " ".join(flags)

    def fails(self, k: int) -> bool:
        return (k * 53) % 100 < self.errors

    def value(self, k: int) -> int:
        return 3 * k + (self.tag + 1 if (k * 37) % 100 < self.differ else 0)

    def answer(self, k: int, count: int) -> tuple[int, bytes]:
        """Status and body of its answer to request ``k``, its replica's ``count``-th."""
        if self.fails(k):
            return 500, _ERROR_BODY
        body: dict[str, int] = {"item": k, "value": self.value(k)}
        if self.noisy:
            body["at"] = count
        return 200, json.dumps(body, separators=(",", ":")).encode()


def raw_response(status: int, body: bytes) -> bytes:
    """The bytes an upstream connection reads for an answer (what lb/mirror_http.py parses)."""
    reason = b"OK" if status == 200 else b"Internal Server Error"
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason,
        len(body),
        body,
    )


def request_head(k: int) -> bytes:
    return b"GET %s%d HTTP/1.1\r\nHost: svc\r\n\r\n" % (PATH.encode(), k)


def differing_share(stable: Nature, new: Nature, ignore: tuple[str, ...], learn: bool) -> float:
    """The share of compared answers a correct verdict must count as differing, over
    a whole cycle of requests: another status class, another ``$.value``, or ``$.at``
    where noise cannot excuse it (not ignored, and new in the new version's answers,
    or not learned: learning needs noise_share > 0)."""
    at_counts = not ignored(NOISE_PATH, frozenset(ignore)) and (
        (new.noisy and not stable.noisy) or ((new.noisy or stable.noisy) and not learn)
    )
    differing = 0
    for k in range(100):
        a, b = stable.fails(k), new.fails(k)
        if a != b or (not a and (stable.value(k) != new.value(k) or at_counts)):
            differing += 1
    return differing / 100


class MirroredAsk:
    """Stands in for lb/mirror.py's ``_ask`` (a copy sent on a connection of its own):
    the simulated replica behind the port answers as its nature says, or not at all
    (refused: ended or not started; a hang: nothing until the copy's timeout)."""

    def __init__(self, backend: SimBackend, clock: FakeClock) -> None:
        self.backend = backend
        self.clock = clock

    async def __call__(
        self, replica: object, request: bytes, head_only: bool, timeout: float
    ) -> Answer | None:
        port = getattr(replica, "port", None)
        handle = self.backend.by_port.get(port) if isinstance(port, int) else None
        if handle is None or not self.backend.alive(handle._pid):
            return None
        proc = self.backend.processes[handle._pid]
        now = self.clock.now()
        if not proc.started(now):
            return None
        if now < proc.hung_until:
            await self.clock.sleep(timeout)
            return None
        if now < proc.probe_fail_until:
            return Answer(503, _JSON, b"")
        found = _TARGET.match(request)
        if found is None:
            return None
        proc.answers += 1
        status, body = proc.nature.answer(int(found.group(1)), proc.answers)
        return Answer(status, _JSON, body)
