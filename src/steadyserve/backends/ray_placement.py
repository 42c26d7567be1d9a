"""What a replica asks Ray for, from the service file's ``resources``, and whether
any node of the cluster could ever give it (pure: no Ray import).

The mapping follows Ray Serve's ``ray_actor_options``: ``cpus`` → ``num_cpus``
(1 when unset, as a Ray actor is scheduled by default), ``memory`` → ``memory``
in bytes, ``accelerators: T4:1`` → ``num_gpus: 1`` plus Ray's
``accelerator_type:T4`` resource, so the replica lands on a node with that GPU.
A request no node can satisfy would leave the actor pending forever; it is
refused instead, naming what is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from steadyserve.spec import Resources

GIB = 1024**3
ACCELERATOR_PREFIX = "accelerator_type:"

_GPU_NAMES = {"GPU"}
"""Accelerator names Ray counts as GPUs: every accelerator in a SkyPilot file is
a GPU kind (T4, A100, L4, H100 ...) except TPUs, which Ray names ``TPU``."""


@dataclass(frozen=True)
class Placement:
    """Ray actor options for one replica."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    memory: int | None = None
    resources: dict[str, float] = field(default_factory=dict)
    accelerator: str | None = None

    def actor_options(self) -> dict[str, object]:
        options: dict[str, object] = {"num_cpus": self.num_cpus}
        if self.num_gpus:
            options["num_gpus"] = self.num_gpus
        if self.memory is not None:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        return options

    def needs(self) -> dict[str, float]:
        """Everything asked for, in the units of ``ray.nodes()[i]["Resources"]``."""
        need = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        if self.memory is not None:
            need["memory"] = float(self.memory)
        need.update(self.resources)  # after the standard ones: messages name those first
        return {k: v for k, v in need.items() if v > 0}

    def describe(self) -> str:
        """The RESOURCES column: ``Ray(cpus=1, gpus=1)``."""
        parts = [f"cpus={_number(self.num_cpus)}"]
        if self.num_gpus:
            gpus = _number(self.num_gpus)
            parts.append(f"gpus={self.accelerator}:{gpus}" if self.accelerator else f"gpus={gpus}")
        if self.memory is not None:
            parts.append(f"memory={_number(self.memory / GIB)}GiB")
        return f"Ray({', '.join(parts)})"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def placement_of(resources: Resources, extra: Mapping[str, float] | None = None) -> Placement:
    """Ray options for ``resources`` (the first accelerator choice: Ray places one
    kind; a list of alternatives is narrowed to the first, as documented)."""
    cpus = resources.min_cpus if resources.min_cpus is not None else 1.0
    memory_gb = resources.min_memory_gb
    memory = int(memory_gb * GIB) if memory_gb is not None else None
    custom = dict(extra or {})
    num_gpus = 0.0
    accelerator = None
    choices = resources.accelerator_choices()
    if choices:
        name, count = choices[0]
        if name.upper() == "TPU" or name.lower().startswith("tpu"):
            custom["TPU"] = count
        else:
            num_gpus = count
            accelerator = name
            if name.upper() not in _GPU_NAMES:
                custom[ACCELERATOR_PREFIX + name] = 0.001  # Ray's marker: a node of that kind
    return Placement(cpus, num_gpus, memory, custom, accelerator)


def unsatisfiable(need: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> str | None:
    """Why no alive node could ever hold ``need`` (by its total resources), or None.

    The message names the first resource no node has enough of, with the most any
    node has, e.g. ``needs GPU 8, the most any node has is 0``."""
    if not nodes:
        return "the Ray cluster has no alive node"
    for node in nodes:
        if all(node.get(key, 0.0) >= amount for key, amount in need.items()):
            return None
    for key, amount in need.items():
        best = max(node.get(key, 0.0) for node in nodes)
        if best < amount:
            if key == "memory":
                amount_text, best_text = f"{amount / GIB:g} GiB", f"{best / GIB:g} GiB"
            else:
                amount_text, best_text = _number(amount), _number(best)
            return f"needs {key} {amount_text}, the most any node has is {best_text}"
    return "no single node has all of " + ", ".join(f"{k} {_number(v)}" for k, v in need.items())
