"""No import circle in taskfuse/runtime: its modules form a graph with a bottom.

Every import of a runtime module by another counts, at module level or inside a function
(a lazy import is a circle put off, not removed); only imports under `if TYPE_CHECKING:`
(annotations, never run) are left out. The circle, if any, is named in the failure.
"""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import taskfuse.runtime

RUNTIME = Path(taskfuse.runtime.__file__).parent
PACKAGE = "taskfuse.runtime"


def _imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """Runtime modules imported by `tree`, outside `if TYPE_CHECKING:` blocks."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module == PACKAGE:  # from taskfuse.runtime import calls (or a name)
                found |= {a.name if a.name in modules else "__init__" for a in node.names}
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith(PACKAGE + ".")}
        stack.extend(ast.iter_child_nodes(node))
    return found


def runtime_graph() -> dict[str, set[str]]:
    modules = {p.stem for p in RUNTIME.glob("*.py")}
    return {name: _imports(ast.parse((RUNTIME / f"{name}.py").read_text()), modules) - {name}
            for name in modules}


def test_the_runtime_has_no_import_circle() -> None:
    graph = runtime_graph()
    assert graph["threads"] >= {"aio", "attempts", "claimer"}  # the walk sees imports
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle in taskfuse/runtime: "
                             f"{' -> '.join(exc.args[1])}") from None


def test_a_lazy_import_back_is_a_circle() -> None:
    graph = runtime_graph()
    graph["calls"] = graph["calls"] | {"context"}  # as calls.ThreadSide once imported it
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        assert set(exc.args[1]) == {"calls", "context"}
    else:
        raise AssertionError("a circle through a lazy import was not seen")


ROLES = ("claimer", "completer", "watchdog", "heartbeat", "listener", "gate", "attempts",
         "workers", "loopfeed")


def test_the_runner_is_the_top_of_the_roles() -> None:
    """The roles are below the runner that composes them: none imports it (only the
    package's front does), so each can be read, tested and reused without it."""
    graph = runtime_graph()
    assert set(ROLES) <= set(graph)
    importers = {name for name, deps in graph.items() if "threads" in deps}
    assert importers <= {"__init__"}, f"modules importing the runner: {sorted(importers)}"


def test_nothing_reads_a_private_runner() -> None:
    """Task contexts, executors and the roles ask the host interface or `Shared`, never a
    runner's private attributes (`ctx._runner`, `runner._x`)."""
    package = RUNTIME.parent
    found = [f"{path.relative_to(package.parent)}:{n}"
             for path in sorted(package.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\._runner\b|\brunner\._[a-z]", line)]
    assert found == []
