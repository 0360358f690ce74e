"""A dependency the store does not hold (never submitted, or pruned) is refused at submit on
every store, and an operator's retry of a task whose parent was pruned does what
docs/operators.md says: a task that ran reopens and runs, one that never ran is left ended."""

from __future__ import annotations

import pytest

from taskfuse import cli
from taskfuse.core import reopen
from taskfuse.core.dag import MissingDependency
from taskfuse.core.retry import ErrorKind, RetryPolicy
from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, Task, TaskSpec
from taskfuse.runtime.retention import prune
from tests.store.backends import ALL_STORES

S = TaskStatus
OLD, NEW, NOW = 1000.0, 9000.0, 10_000.0


def _run(sched: Scheduler, task_id: str, when: float, ok: bool) -> None:
    """Claim exactly `task_id` (it must be ready) and end it SUCCESS or FAILED."""
    others = {t.task_id for t in sched.store.all_tasks()} - {task_id}
    work = sched.claim("w", when, 1, exclude=frozenset(others))
    assert isinstance(work, Work) and [t.task_id for t in work.tasks] == [task_id]
    sched.complete(work.tasks[0], Outcome.success() if ok else Outcome.failure("bad_params"),
                   when)


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_insert_refuses_a_dependency_the_store_does_not_hold(kind, tmp_path) -> None:
    with ALL_STORES[kind](tmp_path) as store:
        with pytest.raises(MissingDependency) as caught:
            store.insert([Task("a", "k", trace_id="a"),
                          Task("b", "k", trace_id="b", depends_on=("a", "typo"))])
        assert (caught.value.task_id, caught.value.missing) == ("b", "typo")
        assert "'b' depends on 'typo'" in str(caught.value)
        assert store.all_tasks() == [] and not any(store.counts().values())  # all or nothing
        store.insert([Task("p", "k", trace_id="p"),  # a parent in the same insert is fine
                      Task("c", "k", trace_id="c", depends_on=("p",))])
        assert {t.task_id for t in store.all_tasks()} == {"p", "c"}


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_a_dependent_of_a_pruned_parent_is_refused(kind, tmp_path) -> None:
    with ALL_STORES[kind](tmp_path) as store:
        sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
        sched.submit(TaskSpec("k", task_id="parent"), OLD)
        _run(sched, "parent", OLD, ok=True)
        assert prune(store, 5000.0, NOW, pause_s=0.0).total == 1
        for submit in (lambda: sched.submit(TaskSpec("k", task_id="child",
                                                     depends_on=("parent",)), NOW),
                       lambda: store.insert([Task("child", "k", trace_id="c",
                                                  depends_on=("parent",))])):
            with pytest.raises(MissingDependency, match="'child' depends on 'parent'"):
                submit()
        assert store.get("child") is None and not any(store.counts().values())


def test_the_submit_command_refuses_a_pruned_parent_in_one_line(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    assert cli.main(["submit", "--store", url, "k", "--id", "parent"]) == 0
    from taskfuse.store import open_store

    store = open_store(url)
    try:
        sched = Scheduler(store)
        _run(sched, "parent", OLD, ok=True)
        assert prune(store, 5000.0, NOW, pause_s=0.0).total == 1
    finally:
        store.close()
    capsys.readouterr()
    assert cli.main(["submit", "--store", url, "k", "--depends-on", "parent"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "depends on 'parent', which the store does not hold" in err


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_retry_of_a_task_whose_parent_was_pruned(kind, tmp_path) -> None:
    """`ran` reopens and runs (its parent succeeded before it ran, SUCCESS is final);
    `never_ran`, canceled when its parent failed, is left ended: reopened, it would wait for
    a parent nobody can retry any more (before, it went PENDING and never became ready)."""
    with ALL_STORES[kind](tmp_path) as store:
        sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
        sched.submit_many([TaskSpec("k", task_id="ok_parent"),
                           TaskSpec("k", task_id="bad_parent"),
                           TaskSpec("k", task_id="ran", depends_on=("ok_parent",)),
                           TaskSpec("k", task_id="never_ran", depends_on=("bad_parent",))],
                          0.0)
        _run(sched, "ok_parent", OLD, ok=True)
        _run(sched, "bad_parent", OLD, ok=False)  # cancels never_ran (upstream failed)
        _run(sched, "ran", NEW, ok=False)
        never_ran = store.get("never_ran")
        assert never_ran.status is S.CANCELED
        assert never_ran.error_kind == ErrorKind.UPSTREAM_FAILED
        pruned = prune(store, 5000.0, NOW, statuses=(S.SUCCESS, S.FAILED), pause_s=0.0)
        assert pruned.removed == {S.SUCCESS: 1, S.FAILED: 1}  # both parents

        result = reopen.retry(store, "ran", NOW)
        assert [t.task_id for t in result.retried] == ["ran"]
        _run(sched, "ran", NOW, ok=True)  # ready at once: its parent's success still counts
        assert store.get("ran").status is S.SUCCESS

        result = reopen.retry(store, "never_ran", NOW)
        assert (result.retried, result.plan.orphaned) == ((), ("never_ran",))
        assert store.get("never_ran").status is S.CANCELED


def test_the_retry_command_names_a_task_left_ended_by_a_pruned_parent(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    from taskfuse.store import open_store

    store = open_store(url)
    try:
        sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
        sched.submit_many([TaskSpec("k", task_id="p"),
                           TaskSpec("k", task_id="c", depends_on=("p",))], 0.0)
        _run(sched, "p", OLD, ok=False)
        assert prune(store, 5000.0, NOW, statuses=(S.FAILED,), pause_s=0.0).total == 1
    finally:
        store.close()
    assert cli.main(["retry", "--store", url, "c"]) == 1
    out = capsys.readouterr().out
    assert "left 1 task(s) ended: they never ran and an upstream was pruned" in out
    assert "nothing to retry" in out
