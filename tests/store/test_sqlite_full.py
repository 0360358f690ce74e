"""A SQLite file that cannot grow (a page limit, a full disk, a file size limit) is
`StoreFull`: nothing of the refused statement is written, and the store says which file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from taskfuse.core.scheduler import Scheduler
from taskfuse.core.task import TaskSpec
from taskfuse.store import StoreFull
from taskfuse.store.sqlite import SQLiteStore


def test_a_page_limit_is_store_full_and_leaves_the_tasks_as_they_were(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "tasks.db")
    try:
        sched, now = Scheduler(store), time.time()
        sched.submit(TaskSpec("k", "x" * 1000), now)
        (pages,) = store._conn().execute("PRAGMA page_count").fetchone()
        store._conn().execute(f"PRAGMA max_page_count = {pages}")  # this thread's connection
        before = store.counts()
        with pytest.raises(StoreFull, match=r"tasks\.db' cannot grow"):
            sched.submit_many([TaskSpec("k", "y" * 1000) for _ in range(50)], now)
        assert store.counts() == before
    finally:
        store.close()
