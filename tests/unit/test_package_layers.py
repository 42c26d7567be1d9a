"""The packages of src/steadyserve form layers: no two import each other, and the few
promises docs/design.md makes about who stands on whom hold ("Every module").

Every import counts: at module level, inside functions, and under TYPE_CHECKING,
read from the source (ast), so a lazy import cannot hide a loop. A top-level module
(``sdk.py``, ``oneline.py``) counts as a package of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "steadyserve"
ROOT = PACKAGE.name


def _unit(module: str) -> str | None:
    """The package (or top-level module) a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == ROOT and len(parts) > 1 else None


def _imports(path: Path, source: Path = PACKAGE) -> Iterator[str]:
    """Every module ``path`` imports, absolute, relative ones resolved."""
    rel = path.relative_to(source.parent).with_suffix("")
    parts = list(rel.parts)
    package = parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module
            # ``from steadyserve import sdk`` imports the module sdk
            yield from (f"{module}.{alias.name}" for alias in node.names)


def edges(source: Path = PACKAGE) -> dict[str, dict[str, list[str]]]:
    """package -> package it imports -> the files that do."""
    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(source.rglob("*.py")):
        rel = path.relative_to(source)
        if rel.parts == ("__init__.py",):
            continue  # the package itself: it only names its version
        me = rel.parts[0].removesuffix(".py")
        for module in _imports(path, source):
            other = _unit(module)
            if other is not None and other != me:
                files = found.setdefault(me, {}).setdefault(other, [])
                if str(rel) not in files:
                    files.append(str(rel))
    return found


def test_no_two_packages_import_each_other() -> None:
    graph = edges()
    pairs = sorted(
        f"{a} <-> {b} ({graph[a][b][0]}, {graph[b][a][0]})"
        for a in graph
        for b in graph[a]
        if a < b and a in graph.get(b, {})
    )
    assert not pairs, "packages that import each other: " + "; ".join(pairs)


def test_the_check_sees_imports_in_functions_and_under_type_checking(tmp_path: Path) -> None:
    """A planted loop hidden the two ways a loop hides: the check must find it."""
    pkg = tmp_path / ROOT
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "a" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from steadyserve.b import y\n"
    )
    (pkg / "b" / "y.py").write_text("def f():\n    from ..a import x\n")
    graph = edges(pkg)
    assert graph == {"a": {"b": ["a/x.py"]}, "b": {"a": ["b/y.py"]}}


def test_the_cli_is_a_leaf() -> None:
    """The CLI stands on client/; nothing stands on the CLI."""
    users = {
        me: files for me, out in edges().items() for other, files in out.items() if other == "cli"
    }
    assert not users, f"modules that import the CLI: {users}"


def test_core_imports_no_other_package() -> None:
    """The pure ground floor: planner, strategies, states, autoscaling, routing."""
    assert edges().get("core", {}) == {}


def test_spec_never_reads_a_peers_format() -> None:
    """Native models are spec/'s own; the peers' formats (compat/) translate into them."""
    assert "compat" not in edges().get("spec", {})


def test_isolation_is_asked_of_the_backend() -> None:
    """The controller and the load balancer never reach a backend's namespaces or its
    process library directly (the backend's ``isolation_unavailable``/``reap_isolation``;
    wire/netns.py for entering a namespace; backends/processes.py for processes)."""
    direct = [
        f"{path}: {module}"
        for unit in ("controller", "lb")
        for path in sorted((PACKAGE / unit).rglob("*.py"))
        for module in _imports(path)
        if module.startswith(("steadyserve.backends.netns", "steadyserve.backends.local"))
    ]
    assert not direct, direct
