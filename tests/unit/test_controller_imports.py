"""No import loop inside controller/ (docs/design.md, "Who imports whom in controller/").

The graph is built from the source (ast), with imports at module level and inside
functions. Imports that run (everything outside ``if TYPE_CHECKING:``) must form no
cycle at all. Counting the type-only imports too, a cycle may only pass through one of
the documented conversations in :data:`CONVERSATIONS`: a helper that names its caller's
type rather than a port of its own. A new loop fails here with its modules named.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "steadyserve" / "controller"
PREFIX = "steadyserve.controller"

CONVERSATIONS: dict[tuple[str, str], str] = {
    # The rollout's parts name the Rollout that owns them (rollout/state.py).
    **{
        (f"rollout.{part}", "rollout.state"): "a part of the update state names its owner"
        for part in ("canary", "blue_green", "holds", "in_place")
    },
    # The HTTP layer answers for the Controller that serves it.
    ("api", "daemon"): "the HTTP API reads the Controller that serves it",
    ("dashboard", "daemon"): "the dashboard reads the Controller that serves it",
    ("fleet", "daemon"): "steady deploy reads the Controller's services",
    ("routes_socket", "daemon"): "the routes-only socket serves the Controller's route tables",
    ("metrics", "daemon"): "/metrics reads the Controller's services",
    ("progressive", "daemon"): "promote/pause/resume/abort find the service's runtime",
    ("pool_api", "daemon"): "the jobs' API finds the pool's runtime",
    ("updates", "daemon"): "an update reads the Controller's store and home",
    # The tick's report (status and route table) is read off the whole runtime.
    ("service_health", "runtime"): "a reconcile pass's report reads its runtime",
    ("startup", "daemon"): "a controller's start takes over for the Controller it starts",
}
"""(importer, imported) -> why: the type-only imports a cycle may pass through."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts) or "__init__"] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(names imported at run time, names imported only for type checking)."""
    runtime: set[str] = set()
    typing: set[str] = set()

    def walk(node: ast.AST, into: set[str]) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                walk(child, typing)
            for child in node.orelse:
                walk(child, into)
            return
        if isinstance(node, ast.Import):
            into.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            into.add(node.module)
            into.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            walk(child, into)

    walk(ast.parse(path.read_text()), runtime)
    return runtime, typing - runtime


def _module_of(name: str, modules: dict[str, Path]) -> str | None:
    """The controller module an imported name lives in (the longest match), if any."""
    if not name.startswith(PREFIX + "."):
        return None
    parts = name[len(PREFIX) + 1 :].split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(run-time edges, run-time plus type-only edges), by controller module."""
    modules = _modules()
    running: dict[str, set[str]] = {}
    every: dict[str, set[str]] = {}
    for name, path in modules.items():
        at_runtime, for_types = _imports(path)
        run = {_module_of(i, modules) for i in at_runtime} - {None, name}
        typed = {_module_of(i, modules) for i in for_types} - {None, name}
        running[name] = {m for m in run if m is not None}
        every[name] = running[name] | {m for m in typed if m is not None}
    return running, every


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_controller_modules_import_each_other_in_no_loop() -> None:
    running, _ = graphs()
    assert not cycles(running), (
        f"controller/ modules import each other in a loop: {cycles(running)}"
    )


def test_type_only_loops_pass_only_through_documented_conversations() -> None:
    _, every = graphs()
    rest = {m: {n for n in out if (m, n) not in CONVERSATIONS} for m, out in every.items()}
    assert not cycles(rest), (
        f"an undocumented import loop in controller/ (type-only imports counted): {cycles(rest)};"
        " give the helper a port (controller/port.py) or document the conversation"
    )


def test_every_documented_conversation_is_still_an_import() -> None:
    _, every = graphs()
    stale = [edge for edge in CONVERSATIONS if edge[1] not in every.get(edge[0], set())]
    assert not stale, f"documented conversations no module has any more: {stale}"


def test_the_replica_helpers_do_not_name_the_runtime() -> None:
    _, every = graphs()
    for helper in ("provisioning", "probing", "readopt", "draining", "exits"):
        assert "runtime" not in every[helper], f"{helper} imports the runtime: use its port"


def test_the_graph_sees_type_only_and_function_level_imports(tmp_path: Path) -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from steadyserve.controller.runtime import X\n"
        "def f():\n    from steadyserve.controller import draining\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    at_runtime, for_types = _imports(path)
    assert "steadyserve.controller.draining" in at_runtime
    assert "steadyserve.controller.runtime.X" in for_types
