"""What this machine can still give a replica: GPUs, pinned cores and fixed ports.

One machine is shared by every replica of every service of a controller, so a
replica's accelerators are not a wish but a set of devices it holds, disjoint
from everyone else's (as Ray hands each actor its own GPU ids, and Kubernetes'
device plugin each pod). This module is the arithmetic alone: an
:class:`Inventory` (what the machine has), the :class:`Assignment` s already
held, and a :class:`Request` (what one replica needs) in; an assignment or an
:class:`Insufficient` reason out. No I/O: the controller reads the machine
(spec/machine.py) and the rows (controller/capacity.py), the tests simulate both.

Reasons read like Kubernetes' scheduler's (``Insufficient nvidia.com/gpu``), so a
PENDING replica says what it waits for.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Gpu:
    """One device, as ``nvidia-smi --query-gpu=index,uuid,name,memory.total`` lists it."""

    index: int
    uuid: str
    name: str
    memory_mb: int | None = None


@dataclass(frozen=True)
class Inventory:
    """What the controller may hand out: its visible GPUs and the cores it may use."""

    gpus: tuple[Gpu, ...] = ()
    cores: tuple[int, ...] = ()


@dataclass(frozen=True)
class Request:
    """What one replica holds while its process runs.

    ``accelerators`` are alternatives in preference order, ``(name, count)``: any
    one of them satisfies the request; ``("", 0)`` is an alternative that needs
    no GPU (an ``any_of`` entry without accelerators). Empty: no GPU asked for."""

    accelerators: tuple[tuple[str, int], ...] = ()
    cores: int = 0
    """Cores to pin the replica to (0: not pinned)."""
    ports: tuple[int, ...] = ()
    """Fixed ports the replica binds (SkyServe's ``ports`` without ``$PORT``)."""

    @property
    def empty(self) -> bool:
        return not (self.accelerators or self.cores or self.ports)


@dataclass(frozen=True)
class Assignment:
    """The devices, cores and ports one replica holds (recorded in its SQLite row)."""

    gpus: tuple[int, ...] = ()
    uuids: tuple[str, ...] = ()
    accelerator: str | None = None
    """The held GPUs' name (``NVIDIA A100-SXM4-80GB``), for routing and status."""
    cores: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.gpus or self.cores or self.ports)

    def to_json(self) -> str:
        out: dict[str, Any] = {}
        if self.gpus:
            out["gpus"], out["uuids"], out["accelerator"] = (
                list(self.gpus),
                list(self.uuids),
                self.accelerator,
            )
        if self.cores:
            out["cores"] = list(self.cores)
        if self.ports:
            out["ports"] = list(self.ports)
        return json.dumps(out, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> Assignment | None:
        """A row's column back; None for a replica that holds nothing recorded
        (older rows, and replicas not admitted yet)."""
        if not text:
            return None
        data = json.loads(text)
        return cls(
            gpus=tuple(int(i) for i in data.get("gpus", ())),
            uuids=tuple(str(u) for u in data.get("uuids", ())),
            accelerator=data.get("accelerator"),
            cores=tuple(int(c) for c in data.get("cores", ())),
            ports=tuple(int(p) for p in data.get("ports", ())),
        )


@dataclass(frozen=True)
class Insufficient:
    """Why a request does not fit now: one line naming what is missing."""

    reason: str
    missing: tuple[str, ...] = field(default=())
    """The resources short (``nvidia.com/gpu``, ``cpu``, ``port``)."""


def gpu_count(count: float) -> int:
    """A fractional GPU (SkyPilot's ``T4:0.5``) still takes one whole device here:
    nothing on one machine shares a device's memory safely between processes."""
    return max(1, math.ceil(count)) if count > 0 else 0


def matches(wanted: str, gpu_name: str) -> bool:
    """``A100`` matches ``NVIDIA A100-SXM4-40GB`` (as ``nvidia-smi -L`` names it)."""
    return wanted.lower() in gpu_name.lower().replace(" ", "")


def assign(
    inventory: Inventory, taken: Iterable[Assignment], request: Request
) -> Assignment | Insufficient:
    """The lowest free devices and cores (and the fixed ports) for ``request``,
    disjoint from every assignment in ``taken``; or why not."""
    held = list(taken)
    used_gpus = {i for a in held for i in a.gpus}
    used_cores = {c for a in held for c in a.cores}
    used_ports = {p for a in held for p in a.ports}
    problems: list[tuple[str, str]] = []

    gpus: tuple[Gpu, ...] = ()
    if request.accelerators:
        picked = _pick_gpus(inventory, used_gpus, request.accelerators)
        if picked is None:
            problems.append((GPU_RESOURCE, _gpu_reason(inventory, used_gpus, request)))
        else:
            gpus = picked
    cores: tuple[int, ...] = ()
    if request.cores:
        free = [c for c in inventory.cores if c not in used_cores]
        if len(free) < request.cores:
            problems.append(
                (
                    "cpu",
                    f"Insufficient cpu: {request.cores} cores to pin, {len(free)} of"
                    f" {len(inventory.cores)} free",
                )
            )
        else:
            cores = tuple(free[: request.cores])
    busy = sorted(set(request.ports) & used_ports)
    if busy:
        listed = ", ".join(str(p) for p in busy)
        problems.append(("port", f"Insufficient port: {listed} held by another replica"))
    if problems:
        return Insufficient("; ".join(why for _, why in problems), tuple(k for k, _ in problems))
    return Assignment(
        gpus=tuple(g.index for g in gpus),
        uuids=tuple(g.uuid for g in gpus),
        accelerator=gpus[0].name if gpus else None,
        cores=cores,
        ports=tuple(sorted(set(request.ports))),
    )


def _pick_gpus(
    inventory: Inventory, used: set[int], choices: Sequence[tuple[str, int]]
) -> tuple[Gpu, ...] | None:
    """The first alternative that fits, on the lowest free indices of one name
    (a replica's devices are alike, as a SkyPilot ``A100:2`` means)."""
    for name, count in choices:
        if count <= 0:
            return ()
        free = [g for g in inventory.gpus if g.index not in used and matches(name, g.name)]
        if len(free) >= count:
            return tuple(sorted(free, key=lambda g: g.index)[:count])
    return None


def _gpu_reason(inventory: Inventory, used: set[int], request: Request) -> str:
    asked = " or ".join(f"{name}:{count}" for name, count in request.accelerators)
    if not inventory.gpus:
        return f"Insufficient {GPU_RESOURCE}: needs {asked}, this machine has no GPU"
    parts = []
    for name, _ in request.accelerators:
        alike = [g for g in inventory.gpus if matches(name, g.name)]
        free = [g for g in alike if g.index not in used]
        parts.append(f"{name}: {len(free)} of {len(alike)} free")
    return f"Insufficient {GPU_RESOURCE}: needs {asked} ({', '.join(parts)})"


def room(inventory: Inventory, taken: Iterable[Assignment], request: Request, limit: int) -> int:
    """How many more replicas asking ``request`` fit now, at most ``limit`` (a
    request of nothing always fits ``limit``)."""
    if request.empty:
        return max(0, limit)
    held = list(taken)
    count = 0
    while count < limit:
        got = assign(inventory, held, request)
        if isinstance(got, Insufficient):
            break
        held.append(got)
        count += 1
    return count


def reason_after(
    inventory: Inventory, taken: Iterable[Assignment], request: Request, count: int
) -> str | None:
    """Why one more replica would not fit once ``count`` more have been admitted:
    what a cap at ``count`` says it lacks (None: it would fit)."""
    held = list(taken)
    for _ in range(max(0, count)):
        got = assign(inventory, held, request)
        if isinstance(got, Insufficient):
            return got.reason
        held.append(got)
    got = assign(inventory, held, request)
    return got.reason if isinstance(got, Insufficient) else None


def visible(inventory: Inventory, cuda_visible_devices: str | None) -> Inventory:
    """The GPUs a controller started with ``CUDA_VISIBLE_DEVICES`` may hand out, as
    Ray reads it: indices or UUIDs; an empty value hides every GPU; unset, all."""
    if cuda_visible_devices is None:
        return inventory
    wanted = [item.strip() for item in cuda_visible_devices.split(",") if item.strip()]
    kept = [g for g in inventory.gpus if any(_names(g, item) for item in wanted)]
    return Inventory(gpus=tuple(kept), cores=inventory.cores)


def _names(gpu: Gpu, item: str) -> bool:
    """CUDA takes an index, a full UUID or a unique UUID prefix (``GPU-8f2a``)."""
    if item.isdigit():
        return int(item) == gpu.index
    return item.startswith("GPU-") and gpu.uuid.startswith(item)
