"""SkyPilot's keys that only make sense on a cloud, and what a file asks that this
machine cannot give.

A SkyServe task file runs here unchanged: every key it may hold is either acted
on (``tls``, ``secrets``, ``file_mounts``, ``ports``, ``workdir``) or named once
as not applicable to the backend in use (:func:`not_applicable_notes`), never
ignored without a word. Pure functions: the CLI prints what they return.
"""

from __future__ import annotations

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
    for key in _RESOURCE_KEYS:
        if getattr(resources, key) is not None:
            notes.append(
                f"resources.{key}: not applicable to the {backend} backend"
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


def isolation_problem(spec: ServiceSpec, backend: str, no_isolation: str | None) -> str | None:
    """Why ``service.isolation: network``, asked for in so many words, cannot be had."""
    if spec.service.isolation != "network":
        return None
    if backend != "local":
        return f"service.isolation: network is for the local backend (not {backend})"
    if no_isolation is not None:
        return f"service.isolation: network is not available here: {no_isolation}"
    return None
