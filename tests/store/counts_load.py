"""What both stores' kept-count tests share: the workload (threads that claim and complete in
groups, successes, retries back to PENDING, failures, while another thread counts all
along), and the checks of the counts by batch and of a migration that starts counting a
table of existing rows."""

from __future__ import annotations

import threading
from typing import Any

from taskfuse.core.states import TaskEvent, TaskStatus
from taskfuse.core.task import move
from tests.store.test_contract import T


def _changes(event: TaskEvent, now: float) -> dict[str, Any]:
    if event is TaskEvent.SUCCEED:
        return {"result": None}
    if event is TaskEvent.RETRY:
        return {"not_before": now, "last_delay": 0.0, "error_kind": "error", "error_msg": "x"}
    return {"error_kind": "error", "error_msg": "x"}


def drain_while_counting(store: Any, tasks: int, threads: int, renew: bool = False
                         ) -> list[int]:
    """Submit `tasks` tasks (one retry each) and drain them with `threads` threads claiming
    16 at a time (renewing their leases first when `renew`) while one more thread sums the
    counts; answers every sum it saw. A worker's error fails the caller."""
    store.insert([T(f"t{i}", max_retry=1, batch_id=BATCHES[i % 3]) for i in range(tasks)])
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            now = 1.0
            while claimed := store.claim(f"w{n}", now, 16, frozenset()):
                if renew:
                    store.heartbeat_many([(t.task_id, t.version) for t in claimed], now)
                moves = []
                for i, task in enumerate(claimed):
                    event = (TaskEvent.SUCCEED, TaskEvent.RETRY, TaskEvent.FAIL)[i % 3]
                    if event is TaskEvent.RETRY and task.retry_count >= task.max_retry:
                        event = TaskEvent.FAIL
                    moves.append((move(task, event, now, **_changes(event, now)),
                                  task.version))
                store.swap_many(moves)
                now += 1.0
        except BaseException as exc:
            errors.append(exc)

    def count() -> None:
        while not done.is_set():
            seen.append(sum(store.counts().values()))

    counter = threading.Thread(target=count)
    counter.start()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    counter.join()
    assert errors == []
    return seen


#: Where drain_while_counting puts its tasks: two batches, and tasks of none.
BATCHES = ("left", "right", None)
#: The batch of seeded row i (`seeded_batch`): none for a quarter of them.
SEEDED_BATCH_SQL = "CASE WHEN {i} % 4 = 0 THEN NULL ELSE 'batch-' || ({i} % 2) END"


def assert_kept_batches(store: Any, scanned: dict[str, dict[TaskStatus, int]]) -> None:
    """Every batch's kept counts equal a count of its rows, and the batches listed are the
    ones the rows name."""
    assert sorted(store.batch_ids()) == sorted(scanned)
    for batch, counts in scanned.items():
        assert store.counts(batch) == counts, batch


def assert_migrated_counts(store: Any, version: int, before: dict[TaskStatus, int],
                           batches: dict[str, dict[TaskStatus, int]]) -> None:
    """The store migrated to `version` counts what a scan of the 3,000 rows seeded before it
    (1,000 RUNNING, 2,000 SUCCESS, three quarters in two batches) counted, in all and by
    batch, and keeps counting a new insert."""
    assert store.schema_version() == version
    assert store.counts() == before
    assert before[TaskStatus.RUNNING] == 1000 and before[TaskStatus.SUCCESS] == 2000
    assert sorted(batches) == ["batch-0", "batch-1"]
    assert_kept_batches(store, batches)
    store.insert([T("new", batch_id="batch-0")])
    assert store.counts()[TaskStatus.PENDING] == 1
    assert store.counts("batch-0")[TaskStatus.PENDING] == 1
