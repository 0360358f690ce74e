"""`lab watch` refuses bad input in one line with one prefix (`lab:`) and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import main as lab_main
from tests.tui.tracegen import Incident


@pytest.mark.parametrize("speed", ["-5", "0", "nan", "inf", "1e9", "0.1", "1001"])
def test_a_speed_off_the_ladder_is_one_line_and_exit_2(
        incident: Incident, speed: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_main(["watch", "--speed", speed, str(incident.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab: --speed ")
    assert "0.25 to 1000" in err


def test_an_empty_file_is_named_so_without_a_bytes_literal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.trace").write_bytes(b"")
    assert lab_main(["watch", str(tmp_path / "empty.trace")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an empty file" in err and "b'" not in err


def test_the_fleet_view_speaks_with_the_same_prefix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_main(["watch", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab: ")


def test_counts_are_plural_correct() -> None:
    from tui.fmt import fmt_many

    assert [fmt_many(n, w) for n, w in ((1, "process"), (2, "process"), (1, "task"),
                                        (0, "task"), (1200, "thread"))] == [
        "1 process", "2 processes", "1 task", "0 tasks", "1,200 threads"]


def test_the_fleet_view_of_a_store_without_batches_says_store(tmp_path: Path) -> None:
    import asyncio

    from taskfuse.store import open_store
    from tests.tui.screen import text_of
    from tui.fleet_app import open_fleet
    from tui.widgets.batches import BatchPanel
    from tui.widgets.fleet import WorkersSummary

    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    open_store(url).close()
    app = open_fleet(url, poll_s=3600)

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await app.wait_idle()
            await pilot.pause()
            assert text_of(app.screen.query_one(BatchPanel)).strip() == "no batches in this store"
            assert "processes" not in text_of(app.screen.query_one(WorkersSummary))

    try:
        asyncio.run(main())
    finally:
        app.store.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("speed", ["nan", "0", "-5", "inf", "1e9"])
def test_simulate_watch_refuses_the_same_speeds_in_one_line(
        speed: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`lab simulate --watch --speed` is bounded by the monitor's own ladder (one place):
    nan passed `speed <= 0` and started a run that never moved."""
    from tests.tui.conftest import SCENARIO

    assert lab_main(["simulate", str(SCENARIO), "--watch", "--no-trace",
                     "--speed", speed]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab simulate: error: argument --speed: ")
    assert "0.25 to 1000" in err
