"""PostgreSQL: a beat of many leases passes over a row another transaction holds.

A beat that waited for such a row (the completer writing a group, a sweeper, a cancel) could
wait in a cycle with a group commit taking the same rows in another order: PostgreSQL found
three such deadlocks in runs of 10,000 async attempts in flight, a second's stall each. The
row is held here by a transaction of the test's own, so the wait, or its absence, is certain.
"""

from __future__ import annotations

import threading

import psycopg

from taskfuse.core.states import TaskEvent
from taskfuse.core.task import move
from tests.store.backends import PG_URL, drop_schema, need_pg, new_schema, pg_url
from tests.store.test_contract import T


def test_a_beat_passes_over_a_held_row_answers_it_current_and_renews_it_next_time() -> None:
    need_pg()
    from taskfuse.store.postgres import PostgresStore

    schema = new_schema()
    store = PostgresStore(pg_url(schema))
    try:
        store.insert([T("a"), T("b"), T("c")])
        a, b, c = store.claim("w", 1.0, 3)
        assert store.swap(move(c, TaskEvent.RETRY, 1.5), c.version)  # c's attempt is over
        attempts = [(t.task_id, t.version) for t in (a, b, c)]
        with psycopg.connect(PG_URL) as holder:  # a transaction holds a's row
            holder.execute(f"SELECT 1 FROM {schema}.tasks WHERE task_id = 'a' FOR UPDATE")
            answer: list[list[bool]] = []
            beat = threading.Thread(target=lambda: answer.append(
                store.heartbeat_many(attempts, 5.0)), daemon=True)
            beat.start()
            beat.join(10.0)
            assert answer == [[True, True, False]], "the beat waited for the held row"
            assert store.get("b").heartbeat_at == 5.0
            assert store.get("a").heartbeat_at != 5.0  # passed over, not renewed
            holder.rollback()
        assert store.heartbeat_many(attempts, 6.0) == [True, True, False]
        assert store.get("a").heartbeat_at == 6.0 and store.get("a").version == a.version
    finally:
        store.close()
        drop_schema(schema)
