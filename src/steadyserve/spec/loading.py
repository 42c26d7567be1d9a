"""Reading service and fleet files from disk into validated specs."""

from __future__ import annotations

import difflib
import stat
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from steadyserve.spec.convert import _format_loc, _validate
from steadyserve.spec.errors import _NAME_RULE, MAX_FILE_BYTES, NAME_PATTERN, TOP_LEVEL, SpecError
from steadyserve.spec.fields import _is_number, _short_repr
from steadyserve.spec.models import ServiceSpec

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


def _read_document(path: str | Path) -> object:
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
    return data


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = ", ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
    return f"invalid YAML{where}: {problem}"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    return f"a {type(value).__name__}"


def _folder_name(base_dir: Path) -> str:
    """SkyServe-style default name: the folder of the file, made name-safe the
    obvious way (``http_server`` -> ``http-server``)."""
    return base_dir.resolve().name.lower().replace("_", "-")


def parse_service(data: object, *, base_dir: Path, name: str | None = None) -> ServiceSpec:
    """Validate one service document already parsed from YAML/JSON.

    ``base_dir`` stands for the file's folder: relative ``workdir`` paths resolve
    against it, and its name is the fallback service name. ``name`` (the CLI's
    ``-n``) wins over the document's ``name:``.
    """
    if not isinstance(data, dict):
        raise SpecError(TOP_LEVEL, f"must be a mapping of service fields, not {_kind(data)}")
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
    return _with_absolute_workdir(spec, base_dir)


def _with_absolute_workdir(spec: ServiceSpec, base_dir: Path) -> ServiceSpec:
    """Resolve ``workdir`` now, while the file's folder is known: the controller
    runs elsewhere and later, and copies the directory per version."""
    if spec.workdir is None:
        return spec
    try:
        path = Path(spec.workdir).expanduser()
        if not path.is_absolute():
            path = base_dir.resolve() / path
        path = path.resolve()
        exists = path.is_dir()
    except (OSError, RuntimeError, ValueError):
        raise SpecError("workdir", f"no such directory: {spec.workdir}") from None
    if not exists:
        raise SpecError("workdir", f"no such directory: {path}")
    return spec.model_copy(update={"workdir": str(path)})


def load_service_file(path: str | Path, name: str | None = None) -> ServiceSpec:
    """Read and validate a service file (what ``steady up``/``update`` take).

    Every problem, from a missing file to a bad field, is one SpecError whose text
    starts with the file as given: ``service.yaml: service.replicas: ...``.
    """
    label = str(path)
    data = _read_document(path)
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
            None, f"file must contain a mapping of service fields, not {_kind(data)}", file=label
        )
    try:
        return parse_service(data, base_dir=Path(path).absolute().parent, name=name)
    except SpecError as exc:
        raise exc.in_file(label) from None


def load_fleet_file(path: str | Path) -> list[ServiceSpec]:
    """Read a fleet file (``steady deploy``): ``services: [...]``, each item a
    service document with its own ``name``. The file is the whole desired state,
    so an item without a name, or two items with one name, is ambiguous: refused."""
    label = str(path)
    data = _read_document(path)
    if not isinstance(data, dict):
        raise SpecError(
            None, f"file must contain a mapping with services: [...], not {_kind(data)}", file=label
        )
    if "applications" in data:  # rsconfig hook: a Ray Serve config file
        from steadyserve.spec.ray_serve import translate

        try:
            return translate(data, Path(path).absolute().parent).specs
        except SpecError as exc:
            raise exc.in_file(label) from None
    for key in data:
        if key not in ("services", "gateway"):
            hint = (
                " (did you mean services?)"
                if difflib.get_close_matches(str(key), ["services"])
                else ""
            )
            raise SpecError(_format_loc([str(key)]), f"unknown field{hint}", file=label)
    items = data.get("services")
    if items is None:
        raise SpecError("services", "required (a list of services)", file=label)
    if not isinstance(items, list):
        raise SpecError("services", "must be a list of services", file=label)
    if not items:
        raise SpecError("services", "must not be empty", file=label)
    base_dir = Path(path).absolute().parent
    specs: list[ServiceSpec] = []
    first_index: dict[str, int] = {}
    mistakes: list[SpecError] = []  # every item is checked: all mistakes in one report
    for index, item in enumerate(items):
        where = f"services[{index}]"
        if not isinstance(item, dict):
            mistakes.append(
                SpecError(where, f"must be a mapping of service fields, not {_kind(item)}")
            )
            continue
        if item.get("name") is None:
            mistakes.append(
                SpecError(f"{where}.name", "required (every service in a fleet file needs a name)")
            )
        try:
            spec = parse_service(item, base_dir=base_dir)
        except SpecError as exc:
            mistakes.append(exc.under(where))
            continue
        if spec.name is None:
            continue
        if spec.name in first_index:
            mistakes.append(
                SpecError(
                    f"{where}.name",
                    f"duplicate service name {spec.name!r} "
                    f"(also services[{first_index[spec.name]}])",
                )
            )
        first_index[spec.name] = index
        specs.append(spec)
    if mistakes:
        raise SpecError.combine(mistakes, file=label)
    return specs
