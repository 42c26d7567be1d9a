"""Can this machine give a replica what its ``resources:`` ask for?

A SkyServe file asking for ``accelerators: A100:1`` must not become a READY
service on a machine without a GPU that then cannot do what was asked. The local
backend runs every replica here, so what the machine has is checked before
anything starts: :func:`resource_problems` is pure (the machine is a value),
:func:`this_machine` reads the real one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass

from steadyserve.core.capacity import Gpu, Inventory, visible
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


def this_inventory(*, gpus: bool = True) -> Inventory:
    """What the controller may hand out: the GPUs it sees (limited to its own
    ``CUDA_VISIBLE_DEVICES`` when set, as Ray does) and the cores it may run on."""
    try:
        cores = tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = tuple(range(os.cpu_count() or 1))
    found = Inventory(gpus=read_gpus() if gpus else (), cores=cores)
    return visible(found, os.environ.get("CUDA_VISIBLE_DEVICES"))


def read_gpus() -> tuple[Gpu, ...]:
    """Every GPU of this machine: from NVML when ``pynvml`` is importable, else
    from ``nvidia-smi --query-gpu``; none when neither answers."""
    found = _nvml_gpus()
    return found if found is not None else _smi_gpus()


def _nvml_gpus() -> tuple[Gpu, ...] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver: let nvidia-smi (or nothing) answer
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name, uuid = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20)
            gpus.append(Gpu(index, _text(uuid), _text(name), int(memory)))
        return tuple(gpus)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]


def _smi_gpus() -> tuple[Gpu, ...]:
    out = _smi(QUERY)
    if out is None:
        return ()
    return parse_query(out)


def parse_query(text: str) -> tuple[Gpu, ...]:
    """``0, GPU-8f2a..., NVIDIA A100-SXM4-80GB, 81920`` per line; a line that does
    not read so is skipped (a driver's warning)."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        memory = int(parts[3]) if len(parts) > 3 and parts[3].isdigit() else None
        gpus.append(Gpu(int(parts[0]), parts[1], parts[2], memory))
    return tuple(gpus)


def _smi(args: list[str]) -> str | None:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run(
            [tool, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


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
