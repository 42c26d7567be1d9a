"""Which bearer token the controller of a home requires, and what its clients send.

One rule for the controller and every client of it (the CLI, the load balancers,
the gateway, the benchmarks): ``STEADY_TOKEN`` when it is set, otherwise the
home's secret (``replica_contract.api_secret``, an HMAC of ``control.key``). So
the home's owner needs no token to paste, and a user who cannot read the home
has nothing to send (docs/security.md). Replicas get neither: their handles
carry the routes-only token.
"""

from __future__ import annotations

import os
from pathlib import Path

from steadyserve.wire import replica_contract as contract

ENV = "STEADY_TOKEN"


def required(home_root: Path) -> str:
    """What the controller of ``home_root`` accepts for its whole API."""
    return os.environ.get(ENV) or contract.api_secret(home_root)


def for_client(home_root: Path) -> str | None:
    """What a client sends; None when this user cannot read the home's key (the
    controller then answers 401, which the client reports)."""
    try:
        return required(home_root)
    except (OSError, ValueError):
        return None


def header(home_root: Path) -> dict[str, str]:
    """``Authorization`` for a call to the controller, or nothing to send."""
    token = for_client(home_root)
    return {"Authorization": f"Bearer {token}"} if token else {}
