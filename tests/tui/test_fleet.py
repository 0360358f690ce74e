"""The fleet view (`lab watch --store URL`): Pilot drives it over real stores that change
between polls. Polls and lookups are started by the test and awaited with `wait_idle` (every
answer the poller thread posted has been applied), never by sleeping."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from lab.cli import main as lab_main
from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.core.task import Batch, Outcome, TaskSpec
from taskfuse.store import StoreError, open_store
from tests.tui.test_app_pilot import text_of
from tui.fleet_app import FleetApp, open_fleet
from tui.screens.fleet import FleetScreen
from tui.screens.fleet_task import FleetTaskScreen
from tui.widgets.batches import BatchPanel
from tui.widgets.fleet import FleetBar, RunningTable, StatesPanel
from tui.widgets.overview import OverviewPanel

PG_URL = os.environ.get("TASKFUSE_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NOW = 1_000_000.0


class Clock:
    """The wall clock the app and the scheduler share, moved by the test."""

    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


def fill(url: str, clock: Clock) -> Scheduler:
    """Five tasks in batch b1, three claimed by two workers, one of those done."""
    sched = Scheduler(open_store(url))
    specs = [TaskSpec("email", task_id=f"t{k}", trace_id=f"tr{k}", max_retry=0)
             for k in range(5)]
    sched.submit_batch(specs, clock(), "b1")
    for worker, n in (("w-1", 2), ("w-2", 1)):
        work = sched.claim(worker, clock(), n)
        assert isinstance(work, Work)
    done = sched.store.get("t0")
    assert done is not None
    sched.complete(done, Outcome(True), clock())
    return sched


def drive(app: FleetApp, scenario: Callable[[FleetApp, Pilot[int]], Awaitable[None]]) -> None:
    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.wait_idle()
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(main())


async def poll(app: FleetApp, pilot: Pilot[int]) -> None:
    app.poll_now()
    await app.wait_idle()
    await pilot.pause()


def board(app: FleetApp) -> FleetScreen:
    screen = app.screen
    assert isinstance(screen, FleetScreen)
    return screen


def check_live_board(url: str, clock: Clock) -> None:
    sched = fill(url, clock)
    app = open_fleet(url, poll_s=3600, clock=clock)

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        s = board(app)
        states = text_of(s.query_one(StatesPanel))
        assert "PENDING 2" in states and "RUNNING 2" in states and "SUCCESS 1" in states
        table = s.query_one(RunningTable)
        assert table.row_count == 2
        assert {str(table.get_row(k)[3]) for k in ("t1", "t2")} == {"w-1", "w-2"}
        batches = text_of(s.query_one(BatchPanel))
        assert "b1" in batches and "RUNNING" in batches and "20%" in batches
        assert "queue 2" in text_of(s.query_one(OverviewPanel))

        # the fleet moves on: every task ends, one of them failed for good
        clock.t += 30
        for worker in ("w-3",):
            sched.claim(worker, clock(), 5)
        for task in sched.store.running():
            ok = task.task_id != "t4"
            sched.complete(task, Outcome(ok, error_kind=None if ok else "fatal",
                                         error_msg=None if ok else "bad input"), clock())
        await poll(app, pilot)
        states = text_of(s.query_one(StatesPanel))
        assert "PENDING 0" in states and "RUNNING 0" in states
        assert "SUCCESS 4" in states and "FAILED 1" in states, states
        assert s.query_one(RunningTable).row_count == 0
        assert "PARTIAL_SUCCESS" in text_of(s.query_one(BatchPanel))
        overview = text_of(s.query_one(OverviewPanel))
        assert "queue 0" in overview and "done 5/5" in overview, overview
        assert len(app.model.timeline.times) == 2  # two polls: the charts' samples

        # lookup by trace_id shows the task's record, esc goes back
        await pilot.press("slash", *"tr4", "enter")
        await app.wait_idle()
        await pilot.pause()
        assert isinstance(app.screen, FleetTaskScreen)
        assert app.screen.found[0][2] == ("state", "FAILED")
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_fleet_view_follows_a_sqlite_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    check_live_board(url, Clock())


def test_running_tasks_show_their_age_and_a_lost_store_is_shown_not_raised(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    app = open_fleet(url, poll_s=3600, clock=clock)

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        clock.t += 75
        await poll(app, pilot)
        row = board(app).query_one(RunningTable).get_row("t1")
        assert str(row[1]) == "1:15.0"  # age of a task claimed 75 s ago
        await pilot.press("enter")  # on the RUNNING table: look the highlighted task up
        await app.wait_idle()
        await pilot.pause()
        assert isinstance(app.screen, FleetTaskScreen)
        assert dict(app.screen.found[0])["worker"] in ("w-1", "w-2")
        await pilot.press("escape")
        app.store.close()  # type: ignore[attr-defined]
        await poll(app, pilot)
        bar = " ".join(text_of(board(app).query_one(FleetBar)).split())  # flowed: any width
        assert bar.startswith("ERROR SQLiteStore"), bar
        assert app.error is not None and "closed" in app.error
        assert board(app).query_one(RunningTable).row_count == 2  # the last good poll stays

    try:
        drive(app, scenario)
    finally:
        sched.store.close()  # type: ignore[attr-defined]


def test_fleet_view_follows_a_postgres_store() -> None:
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        if IN_CI:
            pytest.fail(f"CI=true and PostgreSQL is unreachable: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL is unreachable: {exc}")
    schema = f"tft_{uuid.uuid4().hex[:16]}"
    url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
    try:
        check_live_board(url, Clock())
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))


@pytest.mark.parametrize("url, said", [
    ("postgresql://ops:hunter2@127.0.0.1:1/x", "cannot reach"),
    ("mongodb://ops:hunter2@host/x", "unknown store URL scheme"),
    ("sqlite:///{tmp}/missing.db", "no such SQLite store file"),
    ("memory://", "inside one process"),
])
def test_a_store_that_cannot_be_watched_is_one_line_and_exit_2(
        url: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = lab_main(["watch", "--store", url.format(tmp=tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert said in err and "hunter2" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "missing.db").exists()


def test_watch_needs_exactly_one_of_a_trace_and_a_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["watch"], ["watch", "x.trace", "--store", "sqlite:///x.db"]):
        assert lab_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "watch" in err, err


# -- the worker view, p99, help, history, read-only ------------------------------------------


def _fleet_board(url: str, tmp_path: Path) -> None:
    """Workers, per-batch p99 and the PENDING label, read from a real store."""
    from tests.tui.fleetgen import NOW, PROCESSES, THREADS, fill_fleet
    from tui.screens.fleet_workers import FleetWorkersScreen
    from tui.widgets.fleet import WorkersSummary, WorkersTable

    writer = open_store(url)
    facts = fill_fleet(writer)
    app = open_fleet(url, poll_s=3600, clock=lambda: NOW)

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        s = board(app)
        batches = text_of(s.query_one(BatchPanel))
        assert f"p99 {facts.p99['nightly']:.1f}s" in batches, batches
        assert "backfill" in batches and "PENDING" in batches  # queued, nothing started
        assert "RUNNING" in batches.split("skus")[1].splitlines()[0]
        summary = text_of(s.query_one(WorkersSummary))
        assert f"{len(PROCESSES)} processes" in summary
        assert f"{len(PROCESSES) * THREADS} live threads" in summary
        assert f"run {facts.running}/{len(PROCESSES) * THREADS}" in text_of(
            s.query_one(OverviewPanel))
        await pilot.press("w")
        await app.wait_idle()
        await pilot.pause()
        assert isinstance(app.screen, FleetWorkersScreen)
        table = app.screen.query_one(WorkersTable)
        rows = {str(table.get_row(p)[0]): [str(c) for c in table.get_row(p)] for p in PROCESSES}
        for process in PROCESSES:
            _, threads, busy, stuck, heartbeat, _, done, errors = rows[process]
            assert threads == str(THREADS) and busy == str(THREADS) and stuck == "0"
            assert heartbeat == "3s ago"
            assert done == str(facts.done_by[process])
            assert errors == str(facts.errors_by[process])
        await pilot.press("escape")
        assert isinstance(app.screen, FleetScreen)

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        writer.close()  # type: ignore[attr-defined]


def test_workers_p99_and_queued_batches_from_sqlite(tmp_path: Path) -> None:
    _fleet_board(f"sqlite:///{tmp_path / 'fleet.db'}", tmp_path)


def test_workers_p99_and_queued_batches_from_postgres(tmp_path: Path) -> None:
    from tests.store.backends import drop_schema, need_pg, new_schema, pg_url

    need_pg()
    schema = new_schema()
    try:
        _fleet_board(pg_url(schema), tmp_path)
    finally:
        drop_schema(schema)


def test_help_and_a_task_history_that_grows_while_watched(tmp_path: Path) -> None:
    from tui.screens.help import HelpScreen

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    app = open_fleet(url, poll_s=3600, clock=clock)

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("colon", *"help", "enter")
        assert isinstance(app.screen, HelpScreen)  # not "no task or trace 'help'"
        await pilot.press("escape")
        await pilot.press("colon", *"t1", "enter")
        await app.wait_idle()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetTaskScreen)
        before = [h.what for h in screen.watched.history("t1")]
        assert before[0] == "submitted" and any("started on w-1" in w for w in before)
        clock.t += 12
        running = sched.store.get("t1")
        assert running is not None
        sched.complete(running, Outcome(False, error_kind="fatal", error_msg="bad sku"), clock())
        await poll(app, pilot)  # the watched task is read again with the poll
        after = screen.watched.history("t1")
        seen = [h for h in after if h.seen]
        assert len(seen) == 1 and seen[0].what.startswith("RUNNING -> FAILED")
        assert seen[0].t == clock.t
        assert any(h.what == "ended FAILED: fatal: bad sku" for h in after)

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_watching_creates_nothing_and_cannot_write(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is no store stays untouched; a real store is opened read-only."""
    import sqlite3

    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).close()  # an empty SQLite file: no taskfuse tables
    assert lab_main(["watch", "--store", f"sqlite:///{blank}"]) == 2
    assert "holds no taskfuse store" in capsys.readouterr().err
    with sqlite3.connect(blank) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    sched = fill(url, Clock())
    app = open_fleet(url)
    try:
        with pytest.raises((StoreError, sqlite3.Error), match=r"readonly|read-only"):
            app.store.put_batch(Batch("b-new", None, NOW))  # type: ignore[attr-defined]
        assert sched.store.get_batch("b-new") is None
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_watching_a_postgres_schema_that_does_not_exist_creates_none(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.store.backends import need_pg, new_schema, pg_url

    need_pg()
    import psycopg

    schema = new_schema()
    assert lab_main(["watch", "--store", pg_url(schema)]) == 2
    assert f"no taskfuse schema {schema!r}" in capsys.readouterr().err
    with psycopg.connect(PG_URL) as conn:
        found = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                             [schema]).fetchone()
    assert found == (0,)


def test_search_finds_a_part_of_an_id_with_its_count_while_typing(tmp_path: Path) -> None:
    """`/d7b9` finds task d7b9e2c4 (it needed the whole id), the prompt counts as you type,
    and a part of a kind, batch or key finds its tasks too (issue 25, item 8)."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    sched.submit_batch([TaskSpec("report", task_id="d7b9e2c4", trace_id="tr-x",
                                 idempotency_key="sku-1042")], clock(), "nightly")
    app = open_fleet(url, poll_s=3600, clock=clock)

    def info() -> str:
        return str(app.screen.query_one("#prompt-info").render())

    async def typed(pilot: Pilot[int], *keys: str) -> None:
        await pilot.press(*keys)
        await app.wait_idle()
        await pilot.pause()

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        await typed(pilot, "slash", *"d7b9")
        assert info() == "1 task"
        await typed(pilot, *["backspace"] * 4, *"EMAIL")  # a kind, any case
        assert info() == "5 tasks"
        await typed(pilot, *["backspace"] * 5, *"zzz")
        assert info() == "no match"
        await typed(pilot, *["backspace"] * 3, *"1042", "enter")  # a part of the key
        assert isinstance(app.screen, FleetTaskScreen)
        assert list(app.screen.watched.tasks) == ["d7b9e2c4"]
        await pilot.press("escape")
        await typed(pilot, "colon", *"night", "enter")  # `:` finds a part of a batch too
        assert isinstance(app.screen, FleetTaskScreen)
        assert dict(app.screen.found[0])["batch"] == "nightly"
        clock.t += 5
        sched.cancel("d7b9e2c4", clock())
        await poll(app, pilot)  # a searched task is read again with the poll
        assert dict(app.screen.found[0])["state"] == "CANCELED"

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_an_operator_retry_shows_in_the_task_and_counts_equal_status(tmp_path: Path) -> None:
    """`taskfuse retry` (a process of its own, as an operator runs it) moves a FAILED task of
    a settled batch back to PENDING: the fleet's counts by state and the batch's progress
    equal `taskfuse status --json` at the very next (fast) poll, and the task's view says an
    operator retried it and when (issue 25, item 5)."""
    import subprocess
    import sys
    import time

    from tests.tui.test_real_run import (
        ROOT,
        batch_counts,
        nonzero,
        state_counts,
        status_json,
    )

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    sched.claim("w-3", clock(), 5)
    for task in sched.store.running():
        ok = task.task_id != "t4"
        sched.complete(task, Outcome(ok, error_kind=None if ok else "fatal",
                                     error_msg=None if ok else "bad sku"), clock())
    app = open_fleet(url, poll_s=3600, clock=clock)
    app.slow_poll_s = 3600  # every poll after the first is a fast one

    def agree(s: FleetScreen) -> dict[str, int]:
        counts, batches = status_json(url)
        shown = state_counts(text_of(s.query_one(StatesPanel)))
        assert shown == counts
        assert nonzero(batch_counts(text_of(s.query_one(BatchPanel)))) == nonzero(batches)
        return counts

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        assert agree(board(app))["FAILED"] == 1
        before = time.time()
        subprocess.run([sys.executable, "-m", "taskfuse.cli", "retry", "--store", url, "t4"],
                       check=True, capture_output=True, cwd=ROOT)
        after = time.time()
        await poll(app, pilot)  # a fast poll: the settled batch b1 is counted again
        counts = agree(board(app))
        assert counts["FAILED"] == 0 and counts["PENDING"] == 1
        assert "RUNNING" in text_of(board(app).query_one(BatchPanel))  # not PARTIAL_SUCCESS
        await pilot.press("colon", *"t4", "enter")
        await app.wait_idle()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetTaskScreen)
        assert dict(screen.found[0])["operator retries"].startswith("1, last ")
        [line] = [h for h in screen.watched.history("t4") if "operator" in h.what]
        assert line.what == "retried by an operator: back to PENDING"
        assert line.t is not None and before <= line.t <= after

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_batch_counts_equal_status_when_a_retry_and_a_finish_share_a_poll(
        tmp_path: Path) -> None:
    """`taskfuse retry` (its own process) reopens b1's failed task while b2's running task
    ends, between two fast polls: the number of ended tasks stays the same, which the view
    took for "nothing reopened" and kept b1's old counts (✗1 beside status's ○1) until the
    next slow poll. Every poll now reads every batch's kept counts in one query."""
    import subprocess
    import sys

    from tests.tui.test_real_run import ROOT, batch_counts, nonzero, status_json

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    sched.claim("w-3", clock(), 5)
    for task in sched.store.running():
        ok = task.task_id != "t4"
        sched.complete(task, Outcome(ok, error_kind=None if ok else "fatal",
                                     error_msg=None if ok else "bad sku"), clock())
    sched.submit_batch([TaskSpec("email", task_id="u0", max_retry=0)], clock(), "b2")
    [running] = sched.claim("w-1", clock(), 1).tasks  # type: ignore[union-attr]
    app = open_fleet(url, poll_s=3600, clock=clock)
    app.slow_poll_s = 3600  # every poll after the first is a fast one

    def agree(s: FleetScreen) -> dict[str, dict[str, int]]:
        _, batches = status_json(url)
        shown = nonzero(batch_counts(text_of(s.query_one(BatchPanel))))
        assert shown == nonzero(batches)
        return shown

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        assert agree(board(app))["b1"] == {"SUCCESS": 4, "FAILED": 1}
        subprocess.run([sys.executable, "-m", "taskfuse.cli", "retry", "--store", url, "t4"],
                       check=True, capture_output=True, cwd=ROOT)
        clock.t += 1
        sched.complete(running, Outcome(True), clock())  # one ended as one reopened
        await poll(app, pilot)
        shown = agree(board(app))
        assert shown["b1"] == {"SUCCESS": 4, "PENDING": 1} and shown["b2"] == {"SUCCESS": 1}

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]


def test_the_running_table_sorts_by_a_column_and_says_so(tmp_path: Path) -> None:
    """`>` `<` `I` sort the RUNNING table as they sort the replay's task table; its title
    says the order, and the highlight keeps its task."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    clock = Clock()
    sched = fill(url, clock)
    app = open_fleet(url, poll_s=3600, clock=clock)

    def rows(table: RunningTable) -> list[str]:
        return [str(table.get_row_at(i)[0]) for i in range(table.row_count)]

    async def scenario(app: FleetApp, pilot: Pilot[int]) -> None:
        table = board(app).query_one(RunningTable)
        assert "longest running first" in str(table.border_title)
        await pilot.press("greater_than_sign")  # by task id
        await pilot.pause()
        assert rows(table) == ["t1", "t2"] and "sort task ▲" in str(table.border_title)
        await pilot.press("I")
        await pilot.pause()
        assert rows(table) == ["t2", "t1"] and "sort task ▼" in str(table.border_title)
        assert table.highlighted_task == "t1" and table.cursor_row == 1  # it kept its task
        await pilot.press("I", "j")  # t1 t2, the highlight on t2
        await pilot.pause()
        assert table.highlighted_task == "t2"
        await pilot.press("I")  # the highlight stays on t2, now the first row
        await pilot.pause()
        assert table.highlighted_task == "t2" and table.cursor_row == 0
        await poll(app, pilot)  # a poll keeps the order and the highlight
        assert rows(table) == ["t2", "t1"] and table.highlighted_task == "t2"

    try:
        drive(app, scenario)
    finally:
        app.store.close()  # type: ignore[attr-defined]
        sched.store.close()  # type: ignore[attr-defined]
