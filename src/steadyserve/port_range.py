"""``STEADY_PORTS=LOW-HIGH``: one setting that confines every port SteadyServe
chooses to a range, for a machine whose firewall opens only some ports or that
shares ports with other software.

Without it, endpoints are the first free port from 30001 up, replicas' ports
(and their control ports) come from 20000-29999, and the controller and each
load balancer's metrics listener take any free port. With it, each kind has its
own part of the range, so a port one kind is about to bind is never another
kind's choice in between:

- endpoints (and a Ray Serve config's gateway when it names no port): the first
  quarter, first free from LOW up;
- replicas and their control ports: the middle half;
- the controller and the load balancers' metrics listeners: the last quarter,
  first free from HIGH down.

A part that is full borrows from the rest of the range, never from outside it.
A port a file names (``service.port``, ``service.ports`` run as it is,
``blue_green.preview_port``, ``http_options.port``, ``gateway: {port}``) and
``STEADY_CONTROLLER_PORT`` are taken as named, in the range or not.

The setting is read by the controller when it starts (and by the load balancers
it starts); a running controller keeps the range it started with.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

PORTS_ENV = "STEADY_PORTS"
MIN_PORTS = 8
"""The smallest range that holds one part of each kind."""


class PortRangeError(ValueError):
    """A ``STEADY_PORTS`` that is not ``LOW-HIGH``: one line naming it (bad input)."""


@dataclass(frozen=True)
class PortRange:
    low: int
    high: int

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"

    def __contains__(self, port: object) -> bool:
        return isinstance(port, int) and self.low <= port <= self.high

    @property
    def size(self) -> int:
        return self.high - self.low + 1

    @property
    def endpoints(self) -> range:
        return range(self.low, self.low + self.size // 4)

    @property
    def replicas(self) -> range:
        return range(self.low + self.size // 4, self.high + 1 - self.size // 4)

    @property
    def singles(self) -> range:
        """The controller's and the metrics listeners' part, from HIGH down."""
        return range(self.high, self.high - self.size // 4, -1)

    def in_order(self, part: range) -> list[int]:
        """``part`` first, then the rest of the range (a full part borrows)."""
        rest = [p for p in range(self.low, self.high + 1) if p not in part]
        return [*part, *rest]


def parse(text: str) -> PortRange:
    low_text, dash, high_text = text.strip().partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        low = high = 0
    if not dash or not 1024 <= low <= high <= 65535:
        raise PortRangeError(
            f"{PORTS_ENV}: must be LOW-HIGH, two ports from 1024 to 65535, LOW first, not {text!r}"
        )
    found = PortRange(low, high)
    if found.size < MIN_PORTS:
        raise PortRangeError(
            f"{PORTS_ENV}: {text} holds {found.size} ports; give at least {MIN_PORTS}"
        )
    return found


def from_env(environ: Mapping[str, str] | None = None) -> PortRange | None:
    """The range set in the environment, or None (SteadyServe's usual ports)."""
    raw = (os.environ if environ is None else environ).get(PORTS_ENV, "").strip()
    return parse(raw) if raw else None


def bind_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def first_free(ports: Iterable[int], free: Callable[[int], bool] = bind_free) -> int | None:
    """The first port (in the order given) free now."""
    return next((port for port in ports if free(port)), None)


def single_port(found: PortRange | None) -> int:
    """A port for the controller: 0 (any free one) without a range."""
    if found is None:
        return 0
    port = first_free(found.in_order(found.singles))
    if port is None:
        raise PortRangeError(f"{PORTS_ENV}={found}: no free port left in the range")
    return port
