"""Schedules in a worker: declared in code or in the limits file, one batch per tick however
many workers try, and the real loop woken at its ticks."""

from __future__ import annotations

import json
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from taskfuse.core.states import TaskStatus
from taskfuse.core.task import TaskSpec
from taskfuse.core.ticks import tick_batch_id
from taskfuse.limits.files import parse_limits
from taskfuse.runtime import App, RuntimeConfigError
from taskfuse.runtime.errors import UnknownKind
from taskfuse.runtime.schedules import ScheduleLoop
from taskfuse.store.sqlite import SQLiteStore
from tests.runtime.conftest import JOIN_S

LIMITS = """
schedules:
  nightly:
    cron: "0 2 * * *"
    tz: Europe/Paris
    tasks: [{kind: tick, payload: 1}, {kind: tick, payload: 2}]
    missed: run_last_once
    cap: 1
"""


def _app() -> App:
    app = App("sched-test")

    @app.periodic("* * * * * *", tz="UTC", name="every-second", payload={"p": 1},
                  grace_s=5)
    @app.task("tick", timeout=30)
    def tick(ctx: Any, payload: Any) -> Any:
        return payload

    return app


class _Host:
    """What the loop needs of a runner, around one store, with a fake clock."""

    def __init__(self, app: App, store: Any) -> None:
        self.app, self.store = app, store
        self.scheduler = app.scheduler(store)
        self.stopping = False
        self.clock = time.time

    def work_changed(self) -> None:
        pass


def test_a_schedule_is_declared_on_a_task_on_a_builder_or_in_the_limits() -> None:
    app = _app()

    @app.periodic("*/5 * * * *", tz="Europe/Paris", missed="run_last_once")
    def hourly(at: Any) -> list[TaskSpec]:
        return [app.spec("tick", {"at": at.isoformat(), "i": i}) for i in range(3)]

    app.configure(parse_limits(LIMITS))
    s = app.schedules
    assert sorted(s) == ["every-second", "hourly", "nightly"]
    assert (s["every-second"].kind, s["every-second"].tz) == ("tick", "UTC")
    assert s["hourly"].builder is hourly and s["hourly"].missed == "run_last_once"
    assert s["nightly"].tasks == (("tick", 1), ("tick", 2)) and s["nightly"].cap == 1
    specs = s["hourly"].build(app, 1_800_000_000.0)
    assert [sp.idempotency_key for sp in specs] == [
        f"schedule:hourly@2027-01-15T08:00:00Z#{i}" for i in range(3)]


@pytest.mark.parametrize(("kw", "message"), [
    ({"tz": "Mars/Olympus"}, "schedules.x: time zone 'Mars/Olympus' is not in the tz"),
    ({"tz": "UTC", "missed": "later"}, "schedules.x.missed: input should be 'skip' or"),
    ({"tz": "UTC", "cron": "0 25 * * *"}, "schedules.x: cron expression '0 25 * * *': Bad"),
    ({"tz": "UTC", "name": "a b"}, "schedules.a b: "),
])
def test_a_bad_schedule_is_one_clear_line(kw: dict[str, Any], message: str) -> None:
    app = _app()
    cron = kw.pop("cron", "0 2 * * *")
    kw.setdefault("name", "x")
    with pytest.raises(RuntimeConfigError, match=re.escape(message)):
        app.periodic(cron, **kw)(lambda at: [])


def test_a_limits_schedule_of_an_unknown_kind_is_refused_at_start(make_runner: Any) -> None:
    app = _app()
    app.configure(parse_limits(LIMITS.replace("kind: tick, payload: 2", "kind: nope")))
    runner = make_runner(app, start=False)
    with pytest.raises(UnknownKind, match="nope"):
        runner.start()


def test_four_workers_asking_at_every_tick_submit_each_batch_once(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    app = _app()
    app.configure(parse_limits(LIMITS))
    loops = [ScheduleLoop(_Host(app, store), list(app.schedules.values()), threading.Event())
             for _ in range(4)]
    start = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    for second in range(10):
        for loop in loops:  # every worker wakes a little after the tick, in any order
            loop.step(start + second + 0.01 * (1 + loops.index(loop)))
    assert sum(loop.submitted for loop in loops) == 10 + 1
    assert sum(loop.found for loop in loops) == 3 * (10 + 1)
    every = sorted(b for b in store.batch_ids() if b.startswith("every-second@"))
    assert every == [tick_batch_id("every-second", start + i) for i in range(10)]
    assert all(store.counts(b)[TaskStatus.PENDING] == 1 for b in every)
    batch = store.get_batch(every[-1])
    assert batch is not None and batch.meta == {"schedule": "every-second", "tick": start + 9}
    # the nightly batch: the workers started long after 02:00 Paris, and it says run_last_once
    nightly = [b for b in store.batch_ids() if b.startswith("nightly@")]
    assert nightly == ["nightly@2027-01-15T01:00:00Z"]
    assert store.counts(nightly[0])[TaskStatus.PENDING] == 2
    assert store.get_batch(nightly[0]).cap == 1  # type: ignore[union-attr]
    store.close()


def test_a_runner_submits_at_its_ticks_and_runs_them(tmp_path: Path, make_runner: Any) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    runner = make_runner(_app(), store, workers=2)
    first = time.time()
    end = time.monotonic() + JOIN_S
    while runner.counts()[TaskStatus.SUCCESS] < 3:
        assert time.monotonic() < end, "three ticks never ran"
        time.sleep(0.05)
    runner.shutdown(grace_s=2.0)
    batches = sorted(b for b in store.batch_ids() if b.startswith("every-second@"))
    ticks = [store.get_batch(b).meta["tick"] for b in batches]  # type: ignore[union-attr]
    assert ticks == [ticks[0] + i for i in range(len(ticks))]  # one per second, no gap
    assert ticks[0] >= int(first) - 5  # on time: nothing older than the grace
    done = [t for b in batches for t in store.batch_tasks(b)]
    assert {t.result["p"] for t in done if t.status is TaskStatus.SUCCESS} == {1}
    assert runner.schedule_loop.submitted == len(batches)


def test_status_lists_the_schedules_with_their_next_tick(tmp_path: Path, capsys: Any) -> None:
    from taskfuse.cli import main

    db, limits = tmp_path / "t.db", tmp_path / "limits.yaml"
    limits.write_text(LIMITS)
    store = SQLiteStore(db)
    app = _app()
    app.configure(parse_limits(LIMITS))
    now = time.time()
    ScheduleLoop(_Host(app, store), [app.schedules["every-second"]], threading.Event()).step(now)
    store.close()
    args = ["status", "--store", f"sqlite:///{db}", "--app", "tests.runtime.schedule_app:app",
            "--limits", str(limits)]
    assert main([*args, "--json"]) == 0
    rows = {r["schedule"]: r for r in json.loads(capsys.readouterr().out)["schedules"]}
    assert sorted(rows) == ["every-second", "nightly"]
    assert rows["nightly"]["tz"] == "Europe/Paris" and rows["nightly"]["missed"] == \
        "run_last_once"
    assert rows["nightly"]["next_tick"].endswith(("T02:00:00+01:00", "T02:00:00+02:00"))
    assert rows["nightly"]["last_status"] == "missing"  # no worker ran last night
    second = rows["every-second"]
    assert second["last_batch"].startswith("every-second@") and second["next_tick"] > \
        datetime.fromtimestamp(now, UTC).isoformat()
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "SCHEDULE" in table and "0 2 * * *" in table and "missing" in table
    assert main([*args[:-1], str(tmp_path / "none.yaml")]) == 2


def test_a_builder_that_raises_loses_its_tick_only(tmp_path: Path, caplog: Any) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    app = App("flaky")
    app.task("tick")(lambda ctx, payload: payload)
    calls: list[float] = []

    @app.periodic("* * * * * *", tz="UTC", name="flaky")
    def build(at: datetime) -> list[TaskSpec]:
        calls.append(at.timestamp())
        if len(calls) == 1:
            raise RuntimeError("the catalogue is not reachable")
        return [app.spec("tick", {"at": at.isoformat()})]

    loop = ScheduleLoop(_Host(app, store), list(app.schedules.values()), threading.Event())
    start = 1_800_000_000.0
    assert loop.step(start + 0.1) == start + 1  # the failed tick is not retried
    assert loop.step(start + 1.1) == start + 2
    assert calls == [start, start + 1]
    assert sorted(store.batch_ids()) == [tick_batch_id("flaky", start + 1)]
    assert "building batch flaky@2027-01-15T08:00:00Z failed; tick skipped" in caplog.text
    store.close()


def test_two_workers_waking_at_the_same_instant_still_create_a_tick_once(
        tmp_path: Path) -> None:
    """Two processes woken by one timer can read the same clock value: the second must not
    take the first's task (created at that same instant) for its own."""
    store = SQLiteStore(tmp_path / "t.db")
    app = _app()
    loops = [ScheduleLoop(_Host(app, store), list(app.schedules.values()), threading.Event())
             for _ in range(2)]
    now = 1_800_000_000.25
    for loop in loops:
        loop.step(now)
    assert [loop.submitted for loop in loops] == [1, 0]
    assert [loop.found for loop in loops] == [0, 1]
    store.close()


def test_a_tick_the_store_refused_is_tried_again_and_lands_once(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    app = _app()
    host = _Host(app, SQLiteStore(db))
    host.store.close()  # the database is gone while the tick comes
    loop = ScheduleLoop(host, list(app.schedules.values()), threading.Event())
    start = 1_800_000_000.0
    assert loop.step(start + 0.1) == start + 0.1 + 1  # again in a second, not at the next tick
    assert loop.submitted == 0
    host.store = SQLiteStore(db)  # it is back
    host.scheduler = app.scheduler(host.store)
    assert loop.step(start + 1.2) == start + 2
    assert loop.submitted == 2  # the refused tick, then the one that came meanwhile
    assert sorted(host.store.batch_ids()) == [tick_batch_id("every-second", start + i)
                                              for i in range(2)]
    host.store.close()
