"""Can this machine give a replica what its ``resources:`` ask for?

A SkyServe file asking for ``accelerators: A100:1`` must not become a READY
service on a machine without a GPU that then cannot do what was asked. The local
backend runs every replica here, so what the machine has is checked before
anything starts: :func:`resource_problems` is pure (the machine is a value),
:func:`this_machine` reads the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from steadyserve.spec.models import Resources, ServiceSpec

NVIDIA_SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Machine:
    """What one machine offers a replica."""

    cpus: float
    memory_gb: float
    gpus: tuple[str, ...] = ()
    """One name per GPU, as ``nvidia-smi -L`` prints it (``NVIDIA A100-SXM4-40GB``)."""


def this_machine() -> Machine:
    """This machine: its CPUs (the ones this process may use), memory, and GPUs
    (none when ``nvidia-smi`` is absent or fails)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    except (ValueError, OSError, AttributeError):
        memory = float("inf")
    return Machine(cpus=cpus, memory_gb=memory, gpus=_gpus())


def _gpus() -> tuple[str, ...]:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return ()
    try:
        out = subprocess.run(
            [tool, "-L"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    # "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)"
    names = []
    for line in out.stdout.splitlines():
        head, sep, rest = line.partition(": ")
        if sep and head.startswith("GPU"):
            names.append(rest.split(" (UUID")[0].strip())
    return tuple(names)


def _matching_gpus(machine: Machine, accelerator: str) -> int:
    wanted = accelerator.lower()
    return sum(1 for name in machine.gpus if wanted in name.lower().replace(" ", ""))


def resource_problems(spec: ServiceSpec, machine: Machine) -> list[str]:
    """One line per resource the machine cannot give one replica ([] when it can).

    ``cpus: 2+`` and ``memory: 8+`` are minimums; an accelerator matches a GPU
    whose name contains it (``A100`` matches ``NVIDIA A100-SXM4-40GB``), and a list
    of accelerators is satisfied by any one. ``any_of``/``ordered`` need one
    alternative the machine can give."""
    alternatives = spec.resources.any_of or spec.resources.ordered
    if alternatives:
        found = [
            _problems(spec.resources.model_copy(update=_merge(alt)), machine)
            for alt in alternatives
        ]
        if any(not problems for problems in found):
            return []
        return found[0]
    return _problems(spec.resources, machine)


def _merge(alternative: Resources) -> dict[str, object]:
    return {
        key: value
        for key, value in alternative.model_dump().items()
        if key in ("cpus", "memory", "accelerators") and value is not None
    }


def _problems(resources: Resources, machine: Machine) -> list[str]:
    problems = []
    cpus = resources.min_cpus
    if cpus is not None and cpus > machine.cpus:
        problems.append(
            f"resources.cpus: asks for {resources.cpus}, this machine has {machine.cpus:g} CPUs"
        )
    memory = resources.min_memory_gb
    if memory is not None and memory > machine.memory_gb:
        problems.append(
            f"resources.memory: asks for {resources.memory}, this machine has"
            f" {machine.memory_gb:.1f} GB"
        )
    choices = resources.accelerator_choices()
    if choices and not any(_matching_gpus(machine, name) >= count for name, count in choices):
        asked = " or ".join(f"{name}:{count:g}" for name, count in choices)
        has = ", ".join(machine.gpus) if machine.gpus else "no GPU (nvidia-smi -L found none)"
        problems.append(f"resources.accelerators: asks for {asked}, this machine has {has}")
    return problems
