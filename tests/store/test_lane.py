"""A MemoryStore lane (a run kept in order plus a heap) gives entries in a heap's order.

Claims read the lane's head and pop it; the order decides which task runs first, so it must
be exactly that of one heap over the same entries, whatever the order of pushes and pops.
"""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from taskfuse.core.task import SUBMITTED_FIELDS, Task, new_task
from taskfuse.store.memory import _Lane

#: (-priority, ready_at) of an entry; the sequence number is added in push order.
_KEYS = st.tuples(st.integers(-3, 3), st.sampled_from([0.0, 1.0, 2.5, 7.0]))
_OPS = st.lists(st.one_of(_KEYS, st.just("pop")), max_size=200)


@given(_OPS)
def test_a_lane_pops_in_the_order_a_heap_would(ops: list) -> None:
    lane, heap = _Lane(), []
    for seq, op in enumerate(ops):
        if op == "pop":
            if heap:
                assert lane.head() == heap[0]
                assert lane.pop() == heapq.heappop(heap)
            else:
                assert lane.head() is None
        else:
            entry = (*op, seq, f"t{seq}", 1)
            lane.push(entry)
            heapq.heappush(heap, entry)
        assert len(lane) == len(heap)
    assert [lane.pop() for _ in range(len(lane))] == sorted(heap)


def test_entries_pushed_in_order_stay_out_of_the_heap() -> None:
    lane = _Lane()
    for seq in range(1000):
        lane.push((0, 0.0, seq, f"t{seq}", 1))
    lane.push((-1, 5.0, 1000, "urgent", 1))  # a higher priority breaks the order
    assert (len(lane.run), len(lane.heap)) == (1000, 1)
    assert lane.pop()[3] == "urgent"
    assert lane.pop()[3] == "t0"


def test_new_task_sets_each_field_it_is_given_by_name() -> None:
    values = {name: f"v-{name}" for name in SUBMITTED_FIELDS}
    built = new_task(*(values[name] for name in SUBMITTED_FIELDS))
    assert built == Task(**values)  # type: ignore[arg-type]


def test_a_submitted_task_carries_every_field_of_its_spec() -> None:
    from taskfuse.core.scheduler import Scheduler
    from taskfuse.core.task import TaskSpec
    from taskfuse.store.memory import MemoryStore

    scheduler = Scheduler(MemoryStore())
    scheduler.submit(TaskSpec("parent", task_id="p"), 0.0)
    spec = TaskSpec("k", {"x": 1}, "own-1", "b1", "trace-1", "key-1", ("p",), 7, 2, 9.5, 3.0,
                    ("api",))
    task = scheduler.submit(spec, 1.5)
    assert (task.task_id, task.kind, task.payload, task.batch_id, task.trace_id,
            task.idempotency_key, task.depends_on, task.priority, task.max_retry, task.timeout,
            task.not_before, task.downstreams) == (
        "own-1", "k", {"x": 1}, "b1", "trace-1", "key-1", ("p",), 7, 2, 9.5, 3.0, ("api",))
    assert (task.created_at, task.pending_since, task.version, task.retry_count) == (
        1.5, 1.5, 0, 0)
    assert len(scheduler.submit(TaskSpec("k"), 0.0).trace_id) == 16  # 64 random bits in hex
