"""A whole service file: resources and the top-level :class:`ServiceSpec`."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictBool,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from steadyserve.envs.plan import requirements_path
from steadyserve.spec.base import _Model
from steadyserve.spec.convert import _validate
from steadyserve.spec.errors import TOP_LEVEL, SpecError, _fail
from steadyserve.spec.fields import (
    _MEMORY,
    _MEMORY_UNITS_GB,
    Accelerators,
    Command,
    CpuAmount,
    DiskAmount,
    EnvName,
    ImageId,
    ImportPath,
    JsonMapping,
    MemoryAmount,
    NonEmptyText,
    NumNodes,
    Ports,
    ScalarText,
    ServiceName,
    StringOrJsonMapping,
    Text,
)
from steadyserve.spec.mounts import check_file_mounts
from steadyserve.spec.sections import ServiceSection


def _pip(value: object) -> list[str] | str:
    """``pip:`` as Ray's ``runtime_env.pip``: requirement specifiers, or a
    requirements file inside the workdir (checked against it by the loaders)."""
    if isinstance(value, str):
        if not value.strip():
            raise _fail("must be a list of requirements or a requirements file's path")
        if requirements_path(value) is None:
            raise _fail("a requirements file must be a relative path inside the workdir")
        return value.strip()
    if not isinstance(value, list):
        raise _fail("must be a list of requirements or a requirements file's path")
    for item in value:
        if not isinstance(item, str) or not item.strip() or "\0" in item:
            raise _fail("each requirement must be a non-empty string, like pinme==1.0")
    return [item.strip() for item in value]


PipField = Annotated[list[str] | str, BeforeValidator(_pip)]


class Resources(_Model):
    """What one replica needs.

    ``cpus``/``memory``/``accelerators`` are for the Ray backend's placement; the
    other keys are SkyPilot's, accepted (and type-checked) so SkyServe task files run
    unchanged, and ignored by the local backend, which runs on this machine as is.
    """

    cpus: CpuAmount | None = None
    memory: MemoryAmount | None = None
    accelerators: Accelerators | None = None
    infra: StrictStr | None = None
    cloud: StrictStr | None = None
    region: StrictStr | None = None
    zone: StrictStr | None = None
    instance_type: StrictStr | None = None
    use_spot: StrictBool | None = None
    disk_size: DiskAmount | None = None
    disk_tier: StrictStr | None = None
    ports: Ports | None = None
    image_id: ImageId | None = None
    labels: dict[StrictStr, ScalarText] | None = None
    any_of: list[Resources] | None = None
    ordered: list[Resources] | None = None
    job_recovery: StringOrJsonMapping | None = None
    pin_cpus: StrictBool = False
    """SteadyServe's own key: pin each replica to ``cpus`` cores of its own
    (controller/capacity.py); SkyPilot has none, so the default changes nothing."""

    @property
    def min_cpus(self) -> float | None:
        """The CPU count asked for (``"4+"`` -> 4.0), or None when unspecified."""
        return None if self.cpus is None else float(str(self.cpus).rstrip("+"))

    @property
    def min_memory_gb(self) -> float | None:
        """Memory in GiB asked for (``"512MB"`` -> 0.5), or None when unspecified."""
        if self.memory is None:
            return None
        match = _MEMORY.fullmatch(str(self.memory).strip())
        assert match is not None  # validated
        return float(match.group(1)) * _MEMORY_UNITS_GB[(match.group(2) or "gb").lower()]

    @property
    def memory_limit_bytes(self) -> int | None:
        """The memory limit of one replica: ``memory: 8`` (no ``+``) caps it at
        8 GiB; ``"8+"`` is only a minimum, and no ``memory`` no limit."""
        gb = self.min_memory_gb
        if gb is None or str(self.memory).strip().endswith("+"):
            return None
        return max(1 << 20, int(gb * (1 << 30)))

    def accelerator_choices(self) -> list[tuple[str, float]]:
        """Acceptable ``(name, count)`` options in preference order; [] when none."""
        value = self.accelerators
        if value is None:
            return []
        if isinstance(value, dict):
            items = [k if n is None else f"{k}:{n}" for k, n in value.items()]
        else:
            items = [value] if isinstance(value, str) else list(value)
        choices = []
        for item in items:
            name, _, count = item.partition(":")
            choices.append((name, float(count) if count else 1.0))
        return choices


class ServiceSpec(_Model):
    """One service file, validated. After the loaders, ``name`` is always set and
    ``workdir`` (if any) is an absolute path to an existing directory."""

    name: ServiceName | None = None
    service: ServiceSection = Field(default_factory=ServiceSection)
    resources: Resources = Field(default_factory=Resources)
    envs: dict[EnvName, ScalarText] = Field(default_factory=dict)
    workdir: NonEmptyText | None = None
    setup: Text | None = None
    pip: PipField | None = None
    """Installed into the version's own environment (steadyserve/envs/plan.py)."""
    run: Command | None = None
    import_path: ImportPath | None = None
    num_nodes: NumNodes = 1
    """SkyPilot's key, accepted for compatibility: a replica is one process, so only 1."""
    file_mounts: JsonMapping = Field(default_factory=dict)
    """SkyPilot's key: local sources are copied into the version's workdir (the
    loaders make them absolute); cloud URLs are refused."""
    secrets: dict[EnvName, ScalarText | None] = Field(default_factory=dict)
    """SkyPilot's ``secrets``: environment variables like ``envs``, whose values
    are never shown (plans, status, history). A null value is taken from the
    environment of ``steady`` by the loaders (SkyPilot's ``--secret NAME``)."""

    config: JsonMapping | None = Field(default=None, exclude=True)
    """SkyPilot's per-task overrides of its ``~/.sky/config.yaml`` (docker run
    options, Kubernetes pod settings, ...): named once as not applicable, never stored."""

    @model_validator(mode="before")
    @classmethod
    def _top_level_pool(cls, data: Any) -> Any:
        """SkyPilot's pool file has ``pool:`` at the top; its spec keeps it in the
        service section, and so does this one (sections.py): one model, one check."""
        if not isinstance(data, dict) or "pool" not in data:
            return data
        rest = {k: v for k, v in data.items() if k != "pool"}
        service = rest.get("service")
        if service is None:
            service = {}
        if not isinstance(service, dict):
            return data  # the service section's own check says what is wrong
        if service.get("pool") is not None:
            raise _fail("pool is given twice, at the top and as service.pool: keep one")
        return {**rest, "service": {**service, "pool": data["pool"]}}

    @field_validator("run", "import_path")
    @classmethod
    def _a_pool_runs_jobs(cls, value: Any, info: ValidationInfo) -> Any:
        """A pool's workers only ran ``setup``; each job brings its own ``run``
        (SkyPilot refuses ``run`` in a pool file too)."""
        service = info.data.get("service")
        if value is not None and isinstance(service, ServiceSection) and service.pool:
            raise _fail(
                "a pool's workers run no command of their own: jobs bring theirs"
                " (steady jobs launch --pool NAME job.yaml)"
            )
        return value

    @field_validator("resources")
    @classmethod
    def _one_accelerator_a_pool(cls, value: Resources, info: ValidationInfo) -> Resources:
        """SkyPilot gives every worker of a pool the same accelerator and refuses
        a choice of several, in these words (its users' scripts grep them)."""
        service = info.data.get("service")
        names = {name for name, _ in value.accelerator_choices()}
        if len(names) > 1 and isinstance(service, ServiceSection) and service.pool:
            raise _fail(
                "accelerators {names}: Heterogeneous clusters are not supported for"
                " pools (give one accelerator for all workers)",
                names=", ".join(sorted(names)),
            )
        return value

    @field_validator("file_mounts")
    @classmethod
    def _local_mounts(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_file_mounts(value)
        return value

    application: ServiceName | None = None
    """The Ray Serve application this service was made from; a
    Ray Serve config's deploy removes only services of applications."""
    ray_options: JsonMapping = Field(default_factory=dict)
    """Ray Serve options with no local meaning (``ray_actor_options``,
    ``placement_group_*``, ``runtime_env``, ``args``): stored so that changing
    them restarts replicas, as it does in Ray Serve."""

    @model_validator(mode="after")
    def _command_or_python(self) -> ServiceSpec:
        if self.run is not None and self.import_path is not None:
            raise _fail(
                "run and import_path are mutually exclusive"
                " (a replica is a command or a Python class, not both)"
            )
        if self.service.pool is not None:
            return self  # run and import_path were refused (_a_pool_runs_jobs)
        if self.run is None and self.import_path is None:
            raise _fail(
                "one of run or import_path is required"
                " (a command to start, or a module:attr to serve)"
            )
        return self

    @property
    def replica_kind(self) -> Literal["command", "python", "worker"]:
        if self.service.pool is not None:
            return "worker"
        return "command" if self.run is not None else "python"

    def spec_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): what is stored per version and
        compared, so two specs are equal exactly when their texts are equal."""
        return json.dumps(
            self.model_dump(mode="json"),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ServiceSpec:
        """Read back :meth:`spec_json` (does not re-check that ``workdir`` exists:
        a stored version outlives the directory it was copied from)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SpecError(TOP_LEVEL, f"not valid JSON: {exc}") from None
        return _validate(cls, data)
