"""The runner's settings: the controller's environment over the decorator's defaults.

The controller passes what the service file says (``STEADY_*``, named in
``steadyserve.wire.replica_contract``); a decorated class fills what the environment
leaves out; the contract's defaults fill the rest. A malformed value is a
launcher bug, reported in one line naming the variable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steadyserve.wire import replica_contract as contract


class SettingsError(Exception):
    """A ``STEADY_*`` or ``PORT`` variable that cannot be used."""


@dataclass(frozen=True)
class Settings:
    port: int
    control_port: int
    user_config: Any  # None: no user_config, so reconfigure() is not called at start
    max_ongoing_requests: int
    health_check_timeout_s: float
    graceful_shutdown_timeout_s: float
    graceful_shutdown_wait_loop_s: float = contract.DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S
    control_secret: str | None = None  # None: control requests need no secret
    graph_secret: str | None = None  # None: handle calls carry JSON only, never pickle
    host: str = "127.0.0.1"
    call_socket: str | None = None  # a Unix socket the app server listens on too


def from_env(env: Mapping[str, str], options: Mapping[str, Any]) -> Settings:
    """Settings for one replica; ``options`` are the decorator's (``{}`` if none)."""
    user_config = options.get("user_config")
    raw = env.get(contract.USER_CONFIG)
    if raw is not None:
        try:
            given = json.loads(raw)
        except ValueError as exc:
            raise SettingsError(f"{contract.USER_CONFIG} is not valid JSON ({exc})") from None
        if given is not None:
            user_config = given
    return Settings(
        port=_port(env, contract.PORT),
        control_port=_port(env, contract.CONTROL_PORT),
        host=env.get(contract.HOST) or "127.0.0.1",
        user_config=user_config,
        max_ongoing_requests=_int(
            env,
            contract.MAX_ONGOING_REQUESTS,
            options.get("max_ongoing_requests", contract.DEFAULT_MAX_ONGOING_REQUESTS),
        ),
        health_check_timeout_s=_seconds(
            env,
            contract.HEALTH_CHECK_TIMEOUT_S,
            options.get("health_check_timeout_s", contract.DEFAULT_HEALTH_CHECK_TIMEOUT_S),
            allow_zero=False,
        ),
        graceful_shutdown_timeout_s=_seconds(
            env,
            contract.GRACEFUL_SHUTDOWN_TIMEOUT_S,
            options.get(
                "graceful_shutdown_timeout_s", contract.DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S
            ),
            allow_zero=True,
        ),
        graceful_shutdown_wait_loop_s=_seconds(
            env,
            contract.GRACEFUL_SHUTDOWN_WAIT_LOOP_S,
            options.get(
                "graceful_shutdown_wait_loop_s", contract.DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S
            ),
            allow_zero=False,
        ),
        control_secret=env.get(contract.CONTROL_SECRET) or None,
        graph_secret=env.get(contract.GRAPH_SECRET) or None,
        call_socket=env.get(contract.CALL_SOCKET) or None,
    )


def _port(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name)
    if raw is None:
        raise SettingsError(f"{name} is not set (the port to listen on)")
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a port number, got {raw!r}") from None
    if not 0 < value < 65536:
        raise SettingsError(f"{name} must be a port number in 1..65535, got {value}")
    return value


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer >= 1, got {raw!r}") from None
    if value < 1:
        raise SettingsError(f"{name} must be an integer >= 1, got {value}")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool) -> float:
    raw = env.get(name)
    if raw is None:
        return float(default)
    bound = ">= 0" if allow_zero else "> 0"
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds {bound}, got {raw!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{name} must be a number of seconds {bound}, got {raw!r}")
    return value
