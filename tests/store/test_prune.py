"""Retention on every store: which ended tasks go, which stay, and the kept counts after."""

from __future__ import annotations

from collections import Counter

import pytest

from taskfuse import cli
from taskfuse.core.dag import MissingDependency
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.runtime.retention import RetentionError, parse_age, prune
from tests.store.backends import ALL_STORES

S = TaskStatus
OLD, NEW, NOW = 1000.0, 9000.0, 10_000.0


def _store_with_history(store) -> Scheduler:
    """Old and new endings of every kind, live tasks, and a parent a live task waits for."""
    sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
    ids = ("ok", "bad", "gone", "parent", "q", "qchild", "recent", "running", "waiting")
    sched.submit_batch([TaskSpec("k", task_id=t, idempotency_key=f"key-{t}") for t in ids],
                       0.0, "b")
    sched.submit_many([TaskSpec("k", task_id="child", depends_on=("parent", "waiting"))], 0.0)
    for when, names in ((OLD, ("ok", "bad", "parent", "q", "gone")), (NEW, ("recent",))):
        work = sched.claim("w", when, 9, exclude=frozenset(set(ids) - set(names)))
        assert isinstance(work, Work) and {t.task_id for t in work.tasks} == set(names)
        for task in work.tasks:
            if task.task_id == "gone":
                sched.cancel("gone", when)
                continue
            ok = task.task_id != "bad"
            sched.complete(task, Outcome.success() if ok else Outcome.failure("bad_params"), when)
    work = sched.claim("w", OLD, 1, exclude=frozenset(set(ids) - {"qchild"}))
    sched.complete(work.tasks[0], Outcome.success(), OLD)  # q's child ended too: both may go
    sched.claim("w", NEW, 1, exclude=frozenset(set(ids) - {"running"}))
    return sched


def _full(store, batch: str | None = None) -> dict[TaskStatus, int]:
    seen = Counter(t.status for t in store.all_tasks() if batch is None or t.batch_id == batch)
    return {s: seen.get(s, 0) for s in TaskStatus}


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_prune_removes_old_endings_only_and_keeps_counts_exact(kind, tmp_path) -> None:
    with ALL_STORES[kind](tmp_path) as store:
        sched = _store_with_history(store)
        dry = prune(store, 5000.0, NOW, dry_run=True)
        assert dry.removed == {S.SUCCESS: 3, S.FAILED: 1, S.CANCELED: 1}
        assert len(store.all_tasks()) == 10  # a dry run deletes nothing
        report = prune(store, 5000.0, NOW, chunk=2, pause_s=0.0)
        assert (report.removed, report.chunks) == (dry.removed, 3)
        left = {t.task_id: t.status for t in store.all_tasks()}
        assert left == {"parent": S.SUCCESS, "recent": S.SUCCESS, "running": S.RUNNING,
                        "waiting": S.PENDING, "child": S.PENDING}
        assert store.counts() == _full(store) and store.counts("b") == _full(store, "b")
        assert prune(store, 5000.0, NOW).total == 0  # nothing old is left
        sched.complete(sched.claim("w", NOW, 1, exclude=frozenset({"child"})).tasks[0],
                       Outcome.success(), NOW)  # the child still finds its parent's success
        assert store.get("child").status is S.PENDING
        again = sched.submit(TaskSpec("k", task_id="ok2", idempotency_key="key-ok"), NOW)
        assert again.task_id == "ok2"  # a pruned task's key is free again


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_prune_by_status_and_batch(kind, tmp_path) -> None:
    with ALL_STORES[kind](tmp_path) as store:
        _store_with_history(store)
        assert prune(store, 5000.0, NOW, statuses=(S.FAILED,)).removed == {S.FAILED: 1}
        assert prune(store, 5000.0, NOW, batch_id="other").total == 0
        assert prune(store, 5000.0, NOW, batch_id="b").removed == {S.SUCCESS: 3, S.CANCELED: 1}
        assert store.counts("b") == _full(store, "b")
        with pytest.raises(RetentionError):
            prune(store, 5000.0, NOW, statuses=(S.PENDING,))


def test_prune_command_and_ages(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path}/t.db"
    from taskfuse.store import open_store

    store = open_store(url)
    _store_with_history(store)
    store.close()
    assert cli.main(["prune", "--store", url, "--older-than", "1d", "--dry-run"]) == 0
    assert "would remove 6 ended task(s) older than 86400s: 4 SUCCESS, 1 FAILED, 1 CANCELED" \
        in capsys.readouterr().out
    assert cli.main(["prune", "--store", url, "--older-than", "1d", "--status",
                     "canceled"]) == 0
    assert "removed 1 ended task(s) older than 86400s: 1 CANCELED" in capsys.readouterr().out
    assert cli.main(["prune", "--store", url, "--older-than", "soon"]) == 2
    assert "'soon' is not a positive duration" in capsys.readouterr().err
    assert [parse_age(a) for a in ("45", "30m", "12h", "7d", "1.5w")] == [
        45.0, 1800.0, 43200.0, 604800.0, 907200.0]


def test_the_sweeper_prunes_with_retention_s(tmp_path) -> None:
    from taskfuse.runtime.sweeper import run_sweeper, sweeper_scheduler

    with ALL_STORES["sqlite"](tmp_path) as store:
        _store_with_history(store)
        sched = sweeper_scheduler(store, lease_s=None)
        run_sweeper(sched, once=True, clock=lambda: NOW)
        assert len(store.all_tasks()) == 10  # no retention: every row stays
        run_sweeper(sched, once=True, clock=lambda: NOW, retention_s=5000.0)
        assert len(store.all_tasks()) == 5 and store.counts() == _full(store)


def _old_parents(store, round_: int, n: int) -> list[str]:
    """`n` tasks that ended SUCCESS long ago (old enough to prune), inserted as they are."""
    from taskfuse.core.task import Task

    ids = [f"r{round_}p{i}" for i in range(n)]
    store.insert([Task(p, "k", trace_id=p, created_at=OLD, status=S.SUCCESS, version=2,
                       started_at=OLD, finished_at=OLD) for p in ids])
    return ids


def test_prune_racing_submits_of_dependents_on_postgres(tmp_path) -> None:
    """Dependents submitted by 3 threads while a 4th prunes their parents (real PostgreSQL,
    no lock held by the test): whatever the interleaving, a dependent the store took still
    has its parent (it is ready), and one that came after its parent went is refused
    (MissingDependency) and not stored. Before prune re-checked the dependents under a
    fresh snapshot, a submit committed between the delete's snapshot and its row lock lost
    its parent while ready; before the insert refused a parent it could not lock, a
    dependent that came after its parent went was stored to wait PENDING forever."""
    import random
    import threading

    from taskfuse.core.task import Task

    with ALL_STORES["postgres"](tmp_path) as store:
        for round_ in range(4):
            parents = _old_parents(store, round_, 300)
            order = parents[:]
            random.Random(round_).shuffle(order)
            go = threading.Barrier(4)

            refused: list[str] = []

            def submit(share: list[str], go: threading.Barrier = go,
                       refused: list[str] = refused) -> None:
                go.wait()
                for p in share:
                    try:
                        store.insert([Task(f"c-{p}", "k", trace_id=f"c-{p}", created_at=NOW,
                                           depends_on=(p,), pending_since=NOW)])
                    except MissingDependency as exc:
                        assert (exc.task_id, exc.missing) == (f"c-{p}", p)
                        refused.append(p)

            def prune_all(go: threading.Barrier = go) -> None:
                go.wait()
                prune(store, 1000.0, NOW, chunk=10, pause_s=0.002)

            threads = [threading.Thread(target=submit, args=(order[i::3],)) for i in range(3)]
            threads.append(threading.Thread(target=prune_all))
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            ready = {t.task_id for t in store.claim("w", NOW, 1000)}  # exactly the ready ones
            lost = [p for p in parents if f"c-{p}" in ready and store.get(p) is None]
            waiting = [p for p in parents if f"c-{p}" not in ready]
            stored = [p for p in refused if store.get(f"c-{p}") is not None]
            assert (lost, stored) == ([], []), round_
            assert sorted(waiting) == sorted(refused), round_  # the rest were all ready
            assert store.counts() == _full(store)


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_a_batch_pruned_whole_reads_empty_not_success(kind, tmp_path) -> None:
    """A batch whose every task failed, once pruned, must not read ALL_SUCCESS (it did: no
    task left counted as all of them succeeded); it reads EMPTY wherever a batch's status
    is shown, and `taskfuse wait` on it exits 8."""
    from taskfuse.core.states import BatchStatus
    from taskfuse.runtime.waiting import wait

    with ALL_STORES[kind](tmp_path) as store:
        sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
        sched.submit_batch([TaskSpec("k", task_id=f"f{i}") for i in range(3)], OLD, "doomed")
        for task in sched.claim("w", OLD, 3).tasks:
            sched.complete(task, Outcome.failure("bad_params"), OLD)
        assert sched.batch_status("doomed") is BatchStatus.FAILED
        assert prune(store, 5000.0, NOW).removed == {S.FAILED: 3}
        assert sched.batch_status("doomed") is BatchStatus.EMPTY
        got = wait(store, "doomed", 1.0)
        assert (got.done, got.status, got.kind) == (True, "EMPTY", "batch")


def test_wait_and_status_commands_on_a_pruned_batch(tmp_path, capsys) -> None:
    from taskfuse.store import open_store

    url = f"sqlite:///{tmp_path}/t.db"
    store = open_store(url)
    sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
    sched.submit_batch([TaskSpec("k", task_id=f"f{i}") for i in range(2)], OLD, "doomed")
    for task in sched.claim("w", OLD, 2).tasks:
        sched.complete(task, Outcome.failure("bad_params"), OLD)
    store.close()
    assert cli.main(["prune", "--store", url, "--older-than", "1d"]) == 0
    assert "removed 2 ended task(s) older than 86400s: 2 FAILED" in capsys.readouterr().out
    assert cli.main(["wait", "--store", url, "doomed"]) == 8
    assert "ended EMPTY after waiting 0.0s: no task kept (none submitted yet, or all pruned)" \
        in capsys.readouterr().out
    assert cli.main(["wait", "--store", url, "f0"]) == 2  # a pruned task is unknown
    assert "no task or batch with id 'f0'" in capsys.readouterr().err
    assert cli.main(["status", "--store", url]) == 0
    assert [line.split()[:2] for line in capsys.readouterr().out.splitlines()[1:2]] == [
        ["doomed", "EMPTY"]]


@pytest.mark.parametrize("kind", list(ALL_STORES))
def test_a_batch_without_a_record_pruned_whole_reads_empty(kind, tmp_path) -> None:
    """`submit_many(..., batch_id=)` (and `Runner.submit(kind, batch_id=)`) name a batch
    without recording it: only its tasks knew it, and pruned whole it was an unknown id to
    `wait` and left `status`. Prune records it, so it reads EMPTY as a recorded batch does."""
    from taskfuse.runtime.waiting import wait

    with ALL_STORES[kind](tmp_path) as store:
        sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
        sched.submit_many([TaskSpec("k", task_id=f"l{i}") for i in range(3)], OLD,
                          batch_id="loose")
        assert store.get_batch("loose") is None  # the public API left no record
        for task in sched.claim("w", OLD, 3).tasks:
            sched.complete(task, Outcome.success(), OLD)
        assert prune(store, 5000.0, NOW, chunk=2, pause_s=0.0).removed == {S.SUCCESS: 3}
        batch = store.get_batch("loose")
        assert batch is not None and (batch.cap, batch.created_at) == (None, OLD)
        assert store.batch_ids() == ["loose"]
        got = wait(store, "loose", 1.0)
        assert (got.done, got.status, got.kind) == (True, "EMPTY", "batch")
