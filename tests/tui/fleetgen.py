"""A small fleet with known facts, in a real store: two worker processes with four threads
each took tasks of three batches; some ended, some failed, some still run; each process
wrote its beat as a Runner does.

Used by the fleet view's tests and snapshots. The scheduler moves every task (claims,
completions, heartbeats) with times from a fixed clock, so the same store comes out every
time; the watcher's clock is `NOW`.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.storeapi import Store, WorkerBeat
from taskfuse.core.task import Outcome, TaskSpec

T0 = 1_700_000_000.0
NOW = T0 + 300.0
PROCESSES = ("host-a:101", "host-b:202")
THREADS = 4


@dataclass(frozen=True)
class Fleet:
    """What the store holds, for assertions."""

    running: int
    done_by: dict[str, int]
    errors_by: dict[str, int]
    p99: dict[str, float]


def fill_fleet(store: Store) -> Fleet:
    """Three batches: `nightly` all done (a few failures), `skus` half done and running,
    `backfill` queued (nothing started)."""
    sched = Scheduler(store)
    sizes = {"nightly": 40, "skus": 60, "backfill": 20}
    for k, (batch, n) in enumerate(sizes.items()):
        specs = [TaskSpec("sync_sku", payload={"sku": i}, task_id=f"{batch}-{i}",
                          trace_id=f"tr-{batch}-{i // 2}", max_retry=0) for i in range(n)]
        sched.submit_batch(specs, T0 + k, batch)
    done_by = dict.fromkeys(PROCESSES, 0)
    errors_by = dict.fromkeys(PROCESSES, 0)
    durations: dict[str, list[float]] = {"nightly": [], "skus": []}
    t = T0 + 10
    k = 0
    for batch, count in (("nightly", 40), ("skus", 30)):
        for _ in range(count):
            process = PROCESSES[k % 2]
            worker = f"{process}/{(k // 2) % THREADS}"
            work = sched.claim(worker, t, 1)
            assert isinstance(work, Work)
            (task,) = work.tasks
            assert task.batch_id == batch
            took = 1.0 + (k % 7) * 0.5
            ok = k % 9 != 4
            sched.complete(task, Outcome(ok, error_kind=None if ok else "http_500",
                                         error_msg=None if ok else "partner error"), t + took)
            durations[batch].append(took)
            done_by[process] += 1
            errors_by[process] += 0 if ok else 1
            t += 2.0
            k += 1
    running = 0
    for thread in range(THREADS):
        for process in PROCESSES:
            work = sched.claim(f"{process}/{thread}", NOW - 20 - thread * 7, 1)
            assert isinstance(work, Work)
            running += 1
    for task in store.running():
        store.heartbeat(task.task_id, task.version, NOW - 3)
    for process in PROCESSES:  # what each says of itself, as a Runner's beat does
        store.beat_worker(WorkerBeat(
            process, "fleetgen", THREADS, THREADS, 0, {}, done_by[process] + THREADS,
            done_by[process], 0, T0, NOW - 3, failed=errors_by[process]))
    # nearest rank: the ceil(0.99 n)-th smallest
    p99 = {b: sorted(d)[-(-99 * len(d) // 100) - 1] for b, d in durations.items()}
    return Fleet(running, done_by, errors_by, p99)
