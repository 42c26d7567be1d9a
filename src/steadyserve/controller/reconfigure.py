"""Hand ``user_config`` to a running replica without restarting it.

Command replicas get it as a JSON POST to ``service.reconfigure_path`` on their
own port; 2xx means applied. Anything else fails the replica's reconfigure.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from steadyserve.controller.netns_http import request_in

RECONFIGURE_TIMEOUT_S = 30.0


async def post_user_config(
    session: aiohttp.ClientSession,
    host: str,
    port: int,
    path: str,
    user_config: object,
    timeout_s: float = RECONFIGURE_TIMEOUT_S,
    headers: dict[str, str] | None = None,
    netns: str | None = None,
) -> tuple[bool, bool, str]:
    """(applied, answered, why): a replica that answered a refusal still runs its old config.
    ``netns``: the replica is inside that network namespace (``service.isolation``)."""
    if netns is not None:
        return await _post_in(netns, host, port, path, user_config, timeout_s, headers or {})
    url = f"http://{host}:{port}{path}"
    try:
        async with session.post(
            url,
            data=json.dumps(user_config).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            text = (await response.read())[:200].decode(errors="replace").strip()
            if 200 <= response.status < 300:
                return True, True, ""
            return False, True, f"reconfigure answered {response.status}: {text}"
    except asyncio.TimeoutError:
        return False, False, f"reconfigure timed out after {timeout_s}s"
    except (aiohttp.ClientError, OSError) as exc:
        return False, False, f"reconfigure failed: {type(exc).__name__}"


async def _post_in(
    netns: str,
    host: str,
    port: int,
    path: str,
    user_config: object,
    timeout_s: float,
    headers: dict[str, str],
) -> tuple[bool, bool, str]:
    body = json.dumps(user_config).encode()
    headers = {"Content-Type": "application/json", **headers}
    try:
        status, text = await asyncio.wait_for(
            request_in(netns, host, port, "POST", path, headers, body), timeout_s
        )
    except asyncio.TimeoutError:
        return False, False, f"reconfigure timed out after {timeout_s}s"
    except (OSError, ValueError) as exc:
        return False, False, f"reconfigure failed: {type(exc).__name__}"
    if 200 <= status < 300:
        return True, True, ""
    shown = text[:200].decode(errors="replace").strip()
    return False, True, f"reconfigure answered {status}: {shown}"
