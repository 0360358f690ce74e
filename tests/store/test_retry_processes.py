"""`taskfuse retry` on a batch while 4 worker processes run, on SQLite and PostgreSQL.

A batch holds FAILED, TIMEOUT and CANCELED tasks (and SUCCESS ones, which stay), one FAILED
task has a chain of two dependents CANCELED because of it, and another batch's failures must
not be touched. Workers are busy draining live tasks when the retry lands. Afterwards every
retried task ran exactly once more and ended, nothing else was touched, the kept counts equal
a full count, a second retry is a no-op and an idempotency key still finds its task.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from taskfuse import cli
from taskfuse.core.retry import RetryPolicy
from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.states import TaskStatus
from taskfuse.core.task import Outcome, TaskSpec
from taskfuse.store import open_store
from tests.store import procs
from tests.store.test_processes import CTX, Backend, _join

S = TaskStatus
LIVE = 1500  # tasks the workers are busy with when the retry lands
ENDED = 30  # of each bad ending in the retried batch


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path):
    made = Backend(request.param, tmp_path)
    yield made
    made.cleanup()


def _end_badly(sched: Scheduler, batch: str, prefix: str, now: float) -> None:
    """ENDED tasks each FAILED, TIMEOUT, CANCELED and SUCCESS in `batch`, through the core."""
    specs = [TaskSpec("effect", task_id=f"{prefix}{kind}{i}", idempotency_key=f"{prefix}{kind}{i}",
                      max_retry=0, timeout=5.0)
             for kind in ("f", "t", "c", "s") for i in range(ENDED)]
    sched.submit_batch(specs, now, batch)
    claimed = sched.claim("setup", now, 4 * ENDED)
    assert isinstance(claimed, Work)
    for task in claimed.tasks:
        kind = task.task_id[len(prefix)]
        if kind == "f":
            sched.complete(task, Outcome.failure("bad_params", "no such sku"), now)
        elif kind == "c":
            sched.cancel(task.task_id, now, "canceled by operator")
        elif kind == "s":
            sched.complete(task, Outcome.success(1), now)
    assert len(sched.expire(now + 10.0)) == ENDED  # the t* tasks time out


def _full_counts(store, batch: str | None = None) -> dict[TaskStatus, int]:
    seen = Counter(t.status for t in store.all_tasks() if batch is None or t.batch_id == batch)
    return {s: seen.get(s, 0) for s in TaskStatus}


def _attempts(effects: str) -> Counter[str]:
    query = "SELECT task_id FROM attempts"
    if effects.startswith("sqlite:"):
        import sqlite3

        conn = sqlite3.connect(effects[len("sqlite:"):])
        rows = conn.execute(query).fetchall()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(effects) as conn:
            rows = conn.execute(query).fetchall()
    return Counter(r[0] for r in rows)


def test_retry_a_batch_while_four_workers_run(backend, capsys) -> None:
    store = open_store(backend.url)
    sched = Scheduler(store, policy=RetryPolicy(max_retry=0))
    now = time.time()
    _end_badly(sched, "nightly", "n", now)
    _end_badly(sched, "other", "o", now)
    sched.submit_many([TaskSpec("effect", task_id="dep1", depends_on=("nf0",)),
                       TaskSpec("effect", task_id="dep2", depends_on=("dep1",))], now)
    assert {store.get(t).status for t in ("dep1", "dep2")} == {S.CANCELED}
    before = {t.task_id: t for t in store.all_tasks()}
    sched.submit_batch([TaskSpec("effect", task_id=f"live{i}") for i in range(LIVE)], now, "live")
    workers = [CTX.Process(target=procs.drain, args=(backend.url, backend.effects, f"w{i}"),
                           kwargs={"batch": 8, "idle_exit_s": 3.0, "task_s": 0.004})
               for i in range(4)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while not _attempts(backend.effects) and time.monotonic() < deadline:  # workers are busy
        time.sleep(0.05)

    assert cli.main(["retry", "--store", backend.url, "nightly"]) == 0
    assert store.counts("live")[S.SUCCESS] < LIVE  # the retry landed while they worked
    assert f"retried {3 * ENDED + 2} task(s): {ENDED} FAILED, {ENDED} TIMEOUT, {ENDED + 2} " \
           "CANCELED (2 as dependents)" in capsys.readouterr().out
    _join(workers, 170)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]

    retried = {t for t, task in before.items()
               if task.batch_id == "nightly" and task.status is not S.SUCCESS} | {"dep1", "dep2"}
    attempts = _attempts(backend.effects)
    assert {t: attempts[t] for t in retried} == dict.fromkeys(retried, 1)  # exactly once more
    untouched = set(before) - retried
    assert not any(attempts[t] for t in untouched)
    after = {t.task_id: t for t in store.all_tasks()}
    assert {t: after[t] for t in untouched} == {t: before[t] for t in untouched}
    for task_id in retried:
        task = after[task_id]
        assert (task.status, task.operator_retries) == (S.SUCCESS, 1), task
        assert task.operator_retried_at is not None and task.operator_retried_at >= now
    assert store.counts() == _full_counts(store)
    for batch in ("nightly", "other", "live"):
        assert store.counts(batch) == _full_counts(store, batch)
    assert sched.batch_status("nightly").value == "ALL_SUCCESS"

    assert cli.main(["retry", "--store", backend.url, "nightly"]) == 1  # a no-op
    assert "nothing to retry" in capsys.readouterr().out
    assert {t.task_id: t.version for t in store.all_tasks()} == {
        t: task.version for t, task in after.items()}
    again = sched.submit(TaskSpec("effect", idempotency_key="nf1"), time.time())
    assert again.task_id == "nf1" and again.status is S.SUCCESS  # the key still holds
    store.close()
