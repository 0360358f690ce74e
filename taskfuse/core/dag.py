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
    """A task names a dependency the store does not hold: never submitted (a typo), or
    pruned. Stored, it would wait PENDING forever, so its submission is refused whole."""

    def __init__(self, task_id: str, missing: str) -> None:
        self.task_id = task_id
        self.missing = missing
        super().__init__(f"task {task_id!r} depends on {missing!r}, which the store does not "
                         "hold (never submitted, or pruned): nothing was submitted")


def missing_dependency(tasks: Sequence[tuple[str, Sequence[str]]],
                       stored: Callable[[str], bool]) -> MissingDependency | None:
    """The first dependency of `tasks` ((task_id, depends_on) pairs of one insert) that is
    neither one of them nor `stored`, as the error to raise; None when all are there. Every
    store asks it inside the transaction that inserts, so a parent pruned meanwhile cannot
    slip between the question and the write."""
    ours = {task_id for task_id, _ in tasks}
    for task_id, deps in tasks:
        for dep in deps:
            if dep not in ours and not stored(dep):
                return MissingDependency(task_id, dep)
    return None


def check_graph(
    nodes: Mapping[str, Sequence[str]], exists: Callable[[str], bool] | None = None
) -> list[str]:
    """Validate a graph given as {task_id: depends_on}; returns a topological order.

    A dependency must be a node of the graph or, when `exists` is given, an existing task
    (the stores check that themselves as they insert). Raises MissingDependency or
    CycleError.
    """
    if exists is not None:
        problem = missing_dependency(list(nodes.items()), exists)
        if problem is not None:
            raise problem
    sorter = graphlib.TopologicalSorter({k: [d for d in v if d in nodes] for k, v in nodes.items()})
    try:
        return list(sorter.static_order())
    except graphlib.CycleError as exc:
        raise CycleError(exc.args[1]) from None
