"""No import circle in taskfuse/runtime: its modules form a graph with a bottom.

Every import of a runtime module by another counts, at module level or inside a function
(a lazy import is a circle put off, not removed); only imports under `if TYPE_CHECKING:`
(annotations, never run) are left out: the project's one import graph
(tests/test_import_cycles.py), read for the runtime's own layering. The circle, if any, is
named in the failure.
"""

from __future__ import annotations

import graphlib
import re
from pathlib import Path

import taskfuse.runtime
from tests.test_import_cycles import import_graph

RUNTIME = Path(taskfuse.runtime.__file__).parent
PACKAGE = "taskfuse.runtime"


def runtime_graph() -> dict[str, set[str]]:
    """The runtime's part of the project's import graph (tests/test_import_cycles.py), by
    module name within the package (`__init__` for the package's front)."""
    prefix = PACKAGE + "."

    def ours(name: str) -> bool:
        return name == PACKAGE or name.startswith(prefix)

    def short(name: str) -> str:
        return "__init__" if name == PACKAGE else name.removeprefix(prefix)

    return {short(name): {short(d) for d in deps if ours(d)} - {short(name)}
            for name, deps in import_graph().items() if ours(name)}


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
