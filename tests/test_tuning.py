"""The worker process's heap (`taskfuse.tuning.worker_heap`): what is alive at its start is
frozen out of the collector's sight, collections run rarely, and both are undone on exit,
also when the block fails; a `taskfuse worker` runs its loop inside it."""

from __future__ import annotations

import gc

import pytest

from taskfuse.tuning import worker_heap


def test_the_heap_is_frozen_and_collected_rarely_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    gc.unfreeze()
    alive = [object() for _ in range(1000)]  # held across the block: frozen at its start
    with worker_heap(threshold=12_345):
        assert gc.get_freeze_count() >= len(alive)
        assert gc.get_threshold()[0] == 12_345
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    with pytest.raises(RuntimeError), worker_heap():
        raise RuntimeError("a worker that failed")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_a_worker_command_runs_its_tasks_inside_it(capsys, tmp_path) -> None:
    from taskfuse.cli import main
    from taskfuse.store import open_store

    db = f"sqlite:///{tmp_path / 'heap.db'}"
    app = "tests.runtime.sample_app:app"
    assert main(["submit", "--store", db, "--app", app, "--id", "h", "heap"]) == 0
    before = gc.get_threshold()
    assert main(["worker", "--store", db, "--app", app, "--drain"]) == 0
    capsys.readouterr()
    store = open_store(db)
    try:
        seen = store.get("h").result
    finally:
        store.close()
    assert seen["threshold"] == 50_000 and seen["frozen"] > 1000
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
