"""DAG checks before a graph of tasks is accepted.

Readiness at run time follows graphlib's protocol inside the stores (per-node counts of
unfinished predecessors); this module only rejects graphs that could never finish: a missing
dependency, or a cycle, reported with the cycle itself as data.
"""

from __future__ import annotations

import graphlib
from collections.abc import Callable, Mapping, Sequence

from taskfuse.core.states import TaskfuseError


class DagError(TaskfuseError):
    """A graph of tasks that cannot be scheduled."""


class CycleError(DagError):
    def __init__(self, cycle: Sequence[str]) -> None:
        self.cycle = list(cycle)
        super().__init__("dependency cycle: " + " -> ".join(self.cycle))


class MissingDependency(DagError):
    def __init__(self, task_id: str, missing: str) -> None:
        self.task_id = task_id
        self.missing = missing
        super().__init__(f"task {task_id!r} depends on {missing!r}, which does not exist")


def check_graph(
    nodes: Mapping[str, Sequence[str]], exists: Callable[[str], bool]
) -> list[str]:
    """Validate a graph given as {task_id: depends_on}; returns a topological order.

    A dependency must be a node of the graph or an existing task (`exists`). Raises
    MissingDependency or CycleError.
    """
    for task_id, deps in nodes.items():
        for dep in deps:
            if dep not in nodes and not exists(dep):
                raise MissingDependency(task_id, dep)
    sorter = graphlib.TopologicalSorter({k: [d for d in v if d in nodes] for k, v in nodes.items()})
    try:
        return list(sorter.static_order())
    except graphlib.CycleError as exc:
        raise CycleError(exc.args[1]) from None
