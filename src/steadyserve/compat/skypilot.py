"""SkyPilot's keys that only make sense on a cloud, and what a file asks that this
machine cannot give.

A SkyServe task file runs here unchanged: every key it may hold is either acted
on (``tls``, ``secrets``, ``file_mounts``, ``ports``, ``workdir``) or named once
as not applicable to the backend in use (:func:`not_applicable_notes`), never
ignored without a word. Pure functions: the CLI prints what they return.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from steadyserve.spec.ports import fixed_port, isolated

if TYPE_CHECKING:
    from steadyserve.spec.models import ServiceSpec


# ------------------------------------------------------------- not applicable


SPOT_POLICY_KEYS = ("base_ondemand_fallback_replicas", "dynamic_ondemand_fallback", "spot_placer")
"""SkyServe's spot keys of ``replica_policy``: a local replica is never preempted."""

_RESOURCE_KEYS = (
    "infra",
    "cloud",
    "region",
    "zone",
    "instance_type",
    "use_spot",
    "disk_size",
    "disk_tier",
    "labels",
    "job_recovery",
    "ordered",
)


def not_applicable_notes(spec: ServiceSpec, backend: str = "local") -> list[str]:
    """One line per SkyPilot key the file sets that the backend has no use for."""
    notes = []
    resources = spec.resources
    places = [("resources", resources)] + [
        (f"resources.{group}[{i}]", alt)
        for group in ("any_of", "ordered")
        for i, alt in enumerate(getattr(resources, group) or [])
    ]
    for where, place in places:  # an alternative's zone is no more used than the top's
        for key in _RESOURCE_KEYS:
            if getattr(place, key) is not None:
                notes.append(
                    f"{where}.{key}: not applicable to the {backend} backend"
                    " (replicas run on this machine); ignored"
                )
    policy = spec.service.replica_policy
    for key in SPOT_POLICY_KEYS:
        if policy is not None and getattr(policy, key) is not None:
            notes.append(
                f"service.replica_policy.{key}: not applicable to the {backend} backend"
                " (no spot instances to fall back from); ignored"
            )
    if spec.service.controller_resources is not None:
        notes.append(
            f"service.controller_resources: not applicable to the {backend} backend"
            " (the controller is a process on this machine, not a VM); ignored"
        )
    if spec.config is not None:
        notes.append(
            f"config: not applicable to the {backend} backend (SkyPilot's own settings"
            f" for {', '.join(sorted(spec.config)) or 'nothing'}); ignored"
        )
    if policy is not None:
        for key, advice in policy.deprecated_fields().items():
            # Ray Serve warns the same way (DeprecationWarning) and still applies them.
            notes.append(f"service.replica_policy.{key}: deprecated in Ray Serve; {advice}")
    notes.extend(_port_notes(spec))
    return notes


IGNORE_IMAGE_HINT = "pass --ignore-image to run it on the host anyway"


def image_problems(spec: ServiceSpec) -> list[str]:
    """``resources.image_id`` (and in ``any_of``/``ordered``): one line each.

    SkyPilot runs the replica inside that image (``docker:vllm/vllm-openai``) or on
    that VM image; here a replica runs on the host, without what the image holds,
    which is almost never what the file meant, so it is refused unless asked."""
    found = []
    if spec.resources.image_id is not None:
        found.append(("resources.image_id", spec.resources.image_id))
    for group in ("any_of", "ordered"):
        for i, alt in enumerate(getattr(spec.resources, group) or []):
            if alt.image_id is not None:
                found.append((f"resources.{group}[{i}].image_id", alt.image_id))
    return [
        f"{path}: {_image_text(image)} is an image replicas would run in; here they run"
        " on this machine's host, without it"
        for path, image in found
    ]


def _image_text(image: object) -> str:
    if isinstance(image, dict):
        return ", ".join(f"{k}: {v}" for k, v in image.items())
    return str(image)


def _port_notes(spec: ServiceSpec) -> Iterator[str]:
    port = fixed_port(spec)
    declared = spec.service.ports if spec.service.ports is not None else spec.resources.ports
    if declared is None:
        return
    field = "service.ports" if spec.service.ports is not None else "resources.ports"
    if port is None:
        yield (
            f"{field}: replicas listen on $PORT (run uses it); the endpoint is the"
            " load balancer's port"
        )


def fixed_port_problem(
    spec: ServiceSpec, backend: str = "local", no_isolation: str | None = None
) -> str | None:
    """Why a fixed-port service cannot run as asked on one machine, or None.

    In a network namespace of its own (``service.isolation``) every replica binds
    the file's port, as on its own VM. Without one, replicas here share one
    address, so only one process can bind a fixed port: more than one replica (or
    autoscaling beyond one) would leave the rest failing with "Address already in
    use". ``no_isolation`` is why this machine gives no namespaces (None: it does).
    Said before anything starts."""
    port = fixed_port(spec)
    if port is None or backend != "local":
        return None
    svc = spec.service
    most = svc.replica_policy.max_replicas if svc.replica_policy is not None else svc.replicas
    if most is None or most <= 1 or (isolated(spec) and no_isolation is None):
        return None
    field = "service.ports" if svc.ports is not None else "resources.ports"
    why = "service.isolation is none" if not isolated(spec) else f"no isolation: {no_isolation}"
    return (
        f"{field}: run does not use $PORT, so every replica would bind port {port}, and this"
        f" machine holds one replica per fixed port ({why}; asked for {most}): make the app"
        " listen on $PORT (e.g. --port $PORT; see docs/skyserve.md and docs/isolation.md)"
    )


RAY_SERVE_RUN = re.compile(r"\bserve\s+run\b")
"""Ray Serve's ``serve run``: its HTTP proxy listens on 8000 unless told otherwise."""
RAY_SERVE_DEFAULT_PORT = 8000


def endpoint_port_problem(spec: ServiceSpec) -> str | None:
    """``service.port`` is the endpoint here (the load balancer binds it); SkyServe's
    older files used it for the port the replica listens on. When ``run`` binds
    that same port too (names it, or ``serve run`` on Ray Serve's 8000), the two
    cannot both have it: said at ``up``, before anything starts."""
    port = spec.service.port
    if port is None or spec.run is None:
        return None
    named = re.search(rf"(?<![\w.:-]){port}(?![\w.-])", spec.run) is not None
    serve_run = (
        port == RAY_SERVE_DEFAULT_PORT
        and RAY_SERVE_RUN.search(spec.run) is not None
        and "--port" not in spec.run
    )
    if not (named or serve_run):
        return None
    why = f"run binds {port} too" + (" (serve run listens on 8000)" if serve_run else "")
    return (
        f"service.port: {port} is the endpoint's port here (the load balancer binds it),"
        f" and {why}; in SkyServe's older files service.port was the replica's port:"
        f" write service.ports: {port} for the replica, and steady up --port N for the"
        " endpoint"
    )


def sandbox_note(
    spec: ServiceSpec, backend: str, no_isolation: str | None, no_sandbox: str | None
) -> str | None:
    """What an isolated replica lacks on a machine that gives it a network namespace
    but no sandbox (backends/sandbox.py): said in ``steady up``, the service runs."""
    if backend != "local" or not isolated(spec) or no_isolation is not None:
        return None
    if no_sandbox is None:
        return None
    return (
        f"service.isolation: replicas get a network of their own but no sandbox here"
        f" ({no_sandbox}): they run as root with every capability and see the host's"
        " files, the home included (docs/isolation.md)"
    )


OPEN_PORTS_NOTE = "replica-ports"
"""The name under which :func:`open_ports_note` is said once per home."""


def open_ports_note(spec: ServiceSpec, backend: str, no_isolation: str | None) -> str | None:
    """What a service whose replicas share the host's network leaves open: any local
    user reaches their ports directly, past the load balancer's blocked paths. Said
    by ``steady up`` once per home (docs/security.md)."""
    if backend != "local" or (isolated(spec) and no_isolation is None):
        return None
    closes = "service.isolation: network closes them"
    closes += f" where root can make namespaces (not here: {no_isolation})" if no_isolation else ""
    return (
        "replicas on the host's network listen on 127.0.0.1 ports that any local user can"
        " connect to, past the load balancer's blocked paths (reconfigure_path and"
        f" blocked_paths): {closes}; see docs/security.md"
        " (said once for this home)"
    )


def isolation_problem(spec: ServiceSpec, backend: str, no_isolation: str | None) -> str | None:
    """Why ``service.isolation: network``, asked for in so many words, cannot be had."""
    if spec.service.isolation != "network":
        return None
    if backend != "local":
        return f"service.isolation: network is for the local backend (not {backend})"
    if no_isolation is not None:
        return f"service.isolation: network is not available here: {no_isolation}"
    return None
