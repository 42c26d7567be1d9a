"""Reading service and fleet files from disk into validated specs."""

from __future__ import annotations

import os
import stat
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from steadyserve.oneline import is_number
from steadyserve.spec.convert import _validate
from steadyserve.spec.errors import _NAME_RULE, MAX_FILE_BYTES, NAME_PATTERN, TOP_LEVEL, SpecError
from steadyserve.spec.fields import _short_repr
from steadyserve.spec.models import ServiceSpec
from steadyserve.spec.path_rule import resolve_path
from steadyserve.spec.variables import with_task_values

# ------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses duplicate keys: YAML keeps the last one
    silently, so ``replicas: 2`` … ``replicas: 5`` would hide a real mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def read_document(path: str | Path) -> object:
    """The parsed YAML of a file, or a SpecError naming the file."""
    label = str(path)
    file = Path(path)

    def error(message: str) -> SpecError:
        return SpecError(None, message, file=label)

    try:
        info = file.stat()
        if stat.S_ISDIR(info.st_mode):
            raise error("is a directory, not a file")
        if info.st_size > MAX_FILE_BYTES:
            raise error(f"is larger than 1 MiB ({info.st_size} bytes); is this the right file?")
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error("no such file") from None
    except NotADirectoryError:
        raise error("no such file") from None
    except PermissionError:
        raise error("permission denied") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error("is larger than 1 MiB; is this the right file?")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"is not UTF-8 text (invalid byte at offset {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise error(_yaml_message(exc)) from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}") from None
    except RecursionError:
        raise error("invalid YAML: nested too deeply") from None
    if data is None:
        raise error("file is empty")
    problem = _alias_problem(data)
    if problem:
        raise error(f"invalid YAML: {problem}")
    return data


MAX_EXPANDED_VALUES = 100_000
"""How many values a file may hold once YAML aliases are expanded: far above any
real service file (a large one holds a few hundred), far below what makes a walk
of it hang (nine nested aliases of nine items each expand to 387 million)."""


def _alias_problem(data: object) -> str | None:
    """YAML aliases let a 1 KiB file stand for a structure of billions of values, or
    one that contains itself; every later step (validation, JSON, hashing) walks the
    expanded structure. Counted once per distinct object, so this costs what the
    file's own size does."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(value: object) -> int:
        if not isinstance(value, (list, dict)):
            return 1
        key = id(value)
        known = sizes.get(key)
        if known is not None:
            return known
        if key in open_:
            raise ValueError("a value that contains itself (an alias to an enclosing anchor)")
        open_.add(key)
        items = value.values() if isinstance(value, dict) else value
        total = 1
        for item in items:
            total += size(item)
            if total > MAX_EXPANDED_VALUES:
                raise ValueError(
                    f"aliases expand the file to more than {MAX_EXPANDED_VALUES:,} values"
                )
        open_.discard(key)
        sizes[key] = total
        return total

    try:
        size(data)
    except ValueError as exc:
        return str(exc)
    except RecursionError:
        return "nested too deeply"
    return None


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = ", ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
    return f"invalid YAML{where}: {problem}"


def kind_of(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if is_number(value):
        return "a number"
    return f"a {type(value).__name__}"


def _folder_name(base_dir: Path) -> str:
    """SkyServe-style default name: the folder of the file, made name-safe the
    obvious way (``http_server`` -> ``http-server``)."""
    return base_dir.resolve().name.lower().replace("_", "-")


def parse_service(
    data: object,
    *,
    base_dir: Path,
    name: str | None = None,
    cwd: Path | None = None,
    notes: list[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServiceSpec:
    """Validate one service document already parsed from YAML/JSON.

    ``base_dir`` stands for the file's folder: relative paths (``workdir``,
    ``file_mounts`` sources, ``service.tls`` files) resolve against it, or against
    ``cwd`` when given and the path is only found there (SkyPilot's rule, see
    :func:`~steadyserve.spec.path_rule.resolve_path`); which one was used is added
    to ``notes``. The folder's name is the fallback service name. ``name`` (the
    CLI's ``-n``) wins over the document's ``name:``. A ``secrets`` entry left null
    is read from ``environ``.
    """
    if not isinstance(data, dict):
        raise SpecError(TOP_LEVEL, f"must be a mapping of service fields, not {kind_of(data)}")
    fields: dict[Any, Any] = dict(data)
    if name is not None:
        fields["name"] = name
    elif fields.get("name") is None:
        derived = _folder_name(base_dir)
        if not NAME_PATTERN.fullmatch(derived):
            raise SpecError(
                "name",
                f"no name given, and the folder name {_short_repr(derived)} is not a valid"
                f" service name ({_NAME_RULE}); set name: in the file or pass a name",
            )
        fields["name"] = derived
    spec = _validate(ServiceSpec, fields)
    spec = _with_secret_values(spec, environ)
    return _with_resolved_paths(spec, base_dir, cwd, notes if notes is not None else [])


def _with_secret_values(spec: ServiceSpec, environ: Mapping[str, str] | None) -> ServiceSpec:
    missing = [key for key, value in spec.secrets.items() if value is None]
    if not missing:
        return spec
    found = dict(spec.secrets)
    for key in missing:
        value = (environ or {}).get(key)
        if value is None:
            raise SpecError(
                f"secrets.{key}",
                f"no value: set it in the file, or export {key} before running steady",
            )
        found[key] = value
    return spec.model_copy(update={"secrets": found})


def _with_resolved_paths(
    spec: ServiceSpec, base_dir: Path, cwd: Path | None, notes: list[str]
) -> ServiceSpec:
    """Make every path absolute now, while the file's folder and the current
    directory are known: the controller runs elsewhere and later, and copies the
    workdir per version."""
    update: dict[str, Any] = {}

    def resolve(field: str, text: str, kind: Literal["dir", "any"]) -> str:
        try:
            found = resolve_path(text, file_dir=base_dir.resolve(), cwd=cwd, kind=kind)
        except (OSError, RuntimeError, ValueError):
            found = None
        if found is None:
            what = "directory" if kind == "dir" else "file or directory"
            raise SpecError(field, f"no such {what}: {_looked_in(text, base_dir, cwd)}")
        if found.origin != "absolute" and (cwd is None or cwd.resolve() != base_dir.resolve()):
            notes.append(f"{field}: {text} resolved from the {found.origin}: {found.path}")
        return str(found.path)

    if spec.workdir is not None:
        update["workdir"] = resolve("workdir", spec.workdir, "dir")
        if isinstance(spec.pip, str) and not (Path(update["workdir"]) / spec.pip).is_file():
            raise SpecError("pip", f"no requirements file {spec.pip} in the workdir")
    elif isinstance(spec.pip, str):
        raise SpecError("pip", f"the requirements file {spec.pip} needs a workdir")
    _policy_module_in_workdir(spec, update.get("workdir"))
    if spec.file_mounts:
        update["file_mounts"] = {
            dest: resolve(f"file_mounts.{dest}", source, "any")
            for dest, source in spec.file_mounts.items()
        }
    tls = spec.service.tls
    if tls is not None:
        files = {
            key: resolve(f"service.tls.{key}", getattr(tls, key), "any")
            for key in ("keyfile", "certfile")
        }
        update["service"] = spec.service.model_copy(update={"tls": tls.model_copy(update=files)})
    return spec.model_copy(update=update) if update else spec


def _policy_module_in_workdir(spec: ServiceSpec, workdir: str | None) -> None:
    """A custom policy function is imported from the workdir (in its own process,
    later): a module that is not there is a typo to report now, as Ray does."""
    policy = spec.service.replica_policy
    function = policy.custom_policy_function() if policy is not None else None
    if function is None:
        return
    field = "service.replica_policy.policy.policy_function"
    if workdir is None:
        raise SpecError(field, f"{function} is imported from the workdir; set workdir")
    module = function.partition(":")[0].replace(".", "/")
    root = Path(workdir)
    if not ((root / f"{module}.py").is_file() or (root / module / "__init__.py").is_file()):
        raise SpecError(field, f"no module {module}.py in the workdir {workdir}")


def _looked_in(text: str, base_dir: Path, cwd: Path | None) -> str:
    """The path that is missing: one absolute path when only one place was tried."""
    path = Path(text).expanduser()
    if path.is_absolute() or cwd is None or cwd.resolve() == base_dir.resolve():
        try:
            return str((base_dir / path).resolve())
        except (OSError, RuntimeError, ValueError):
            return text
    return (
        f"{text} (looked in the file's folder {base_dir.resolve()} and the current directory {cwd})"
    )


def load_service_file(
    path: str | Path,
    name: str | None = None,
    notes: list[str] | None = None,
    envs: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
) -> ServiceSpec:
    """Read and validate a service file (what ``steady up``/``update`` take).

    Relative paths follow SkyPilot's rule (the current directory when the path
    is not in the file's folder); ``notes`` receives which one each used.
    ``envs``/``secrets`` are SkyPilot's ``--env``/``--secret``: they set the
    file's entries, and ``$KEY`` in ``service`` and ``file_mounts`` is filled
    with the file's variables (spec/variables.py).

    Every problem, from a missing file to a bad field, is one SpecError whose text
    starts with the file as given: ``service.yaml: service.replicas: ...``.
    """
    label = str(path)
    data = read_document(path)
    if (
        isinstance(data, dict)
        and "services" in data
        and "run" not in data
        and "import_path" not in data
    ):
        raise SpecError(
            "services",
            "unknown field (this looks like a fleet file; use steady deploy)",
            file=label,
        )
    if not isinstance(data, dict):
        raise SpecError(
            None, f"file must contain a mapping of service fields, not {kind_of(data)}", file=label
        )
    try:
        data = with_task_values(data, envs or {}, secrets or {})
        return parse_service(
            data,
            base_dir=Path(path).absolute().parent,
            name=name,
            cwd=Path.cwd(),
            notes=notes,
            environ=os.environ,
        )
    except SpecError as exc:
        raise exc.in_file(label) from None
