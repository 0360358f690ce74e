"""The pure data behind the panels: timeline lookups, charts, snapshots, time parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from taskfuse.trace import read_trace
from tests.tui.tracegen import Incident
from tui.commands import parse_command, parse_time
from tui.fmt import fmt_alert_value, fmt_num, fmt_t, fmt_wait
from tui.sources import TraceSource
from tui.trace_model import (
    SPEEDS,
    BatchRow,
    Meta,
    Timeline,
    TraceModel,
    bars,
    fit,
    next_speed,
    seek_step,
    snap_speed,
)


def _timeline() -> Timeline:
    tl = Timeline(["a", "b"])
    tl.append(np.array([0.0, 1.0, 2.0]), np.array([[1, 10], [2, np.nan], [3, 30]], float))
    return tl


def test_timeline_holds_the_last_sample_at_or_before_t() -> None:
    tl = _timeline()
    assert tl.index_at(-0.1) == -1
    assert tl.index_at(0.0) == 0
    assert tl.index_at(1.99) == 1
    assert tl.index_at(99) == 2
    assert tl.value("a", tl.index_at(1.5)) == 2.0
    assert tl.value("b", 1) is None  # a null in the trace
    assert tl.value("missing", 1) is None
    assert tl.value("a", -1) is None


def test_timeline_grows_by_appending() -> None:
    tl = _timeline()
    for k in range(3, 200):
        tl.append(np.array([float(k)]), np.array([[k, k]], float))
    assert tl.n == 200
    assert tl.value("a", tl.index_at(150.5)) == 150.0
    assert list(tl.times[:3]) == [0.0, 1.0, 2.0]


def test_chart_stops_at_the_cursor_and_keeps_peaks() -> None:
    tl = Timeline(["q"])
    t = np.arange(100.0)
    v = np.zeros(100)
    v[40] = 9.0  # a one-sample spike must survive pooling
    tl.append(t, v[:, None])
    chart = tl.chart("q", tl.index_at(50), 0.0, 99.0, 10)
    assert chart[4] == 9.0
    assert np.isnan(chart[6:]).all()  # after the cursor: nothing drawn yet
    assert not np.isnan(chart[:5]).any()


def test_fit_pools_by_max_and_pads() -> None:
    assert list(fit(np.array([1.0, 5.0, 2.0, 3.0]), 2)) == [5.0, 3.0]
    padded = fit(np.array([1.0]), 3)
    assert padded[0] == 1.0 and np.isnan(padded[1:]).all()


def test_bars_scale_to_the_top_and_leave_gaps_blank() -> None:
    rows = bars(np.array([0.0, 4.0, 8.0, np.nan]), height=1, top=8.0)
    assert rows == [" ▄█ "]
    two = bars(np.array([8.0, 2.0]), height=2, top=8.0)
    assert two == ["█ ", "█▄"]  # 2 of 8 over two rows: half of the lower cell


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90", 90.0), ("90s", 90.0), ("1:30", 90.0), ("1:00:00", 3600.0), ("2m", 120.0),
     ("+10", 60.0), ("-10", 40.0), ("50%", 50.0), ("nonsense", None), ("", None)],
)
def test_parse_time(text: str, expected: float | None) -> None:
    assert parse_time(text, now=50.0, span=(0.0, 100.0)) == expected


def test_parse_command_views_times_and_tasks() -> None:
    span = (0.0, 100.0)
    assert parse_command("tasks", 0, span).view == "tasks"
    assert parse_command("dash", 0, span).view == "dashboard"
    assert parse_command("help", 0, span).view == "help"
    assert parse_command("end", 0, span).t == 100.0
    assert parse_command("task t0000001", 0, span).task == "t0000001"
    assert parse_command("q", 0, span).quit
    assert parse_command("  ", 0, span).empty
    # anything that is no view and no time is a task lookup: the app resolves it
    assert parse_command("skus-5", 0, span).task == "skus-5"
    assert parse_command("-5", 50, span).t == 45.0  # a relative time wins over an id


def test_number_formats_say_exactly_what_the_trace_carries() -> None:
    assert [fmt_num(x) for x in (812, 1346, 22_549, 225_000, 1_000_000)] == [
        "812", "1346", "22.5k", "225k", "1.00M"]
    assert [fmt_wait(x) for x in (0.2, 9.0, 125, 3720)] == ["1s", "9s", "2m05s", "1h02m"]
    assert fmt_alert_value("success_rate_low", 0.62) == "62.0%"
    assert fmt_alert_value("p99_above_history", 3.78689) == "x3.8"
    assert fmt_alert_value("TaskfuseP99AboveHistory", 12.5) == "x12"
    assert fmt_alert_value("queue_depth_high", 812.0) == "812"
    assert fmt_alert_value("queue_depth_high", 812.25) == "812"
    assert fmt_alert_value("custom", 0.123456) == "0.123"
    assert fmt_alert_value("custom", None) == "–"


def test_speed_ladder_and_seek_step() -> None:
    assert next_speed(1, up=True) == 2
    assert next_speed(1000, up=True) == 1000
    assert next_speed(0.25, up=False) == 0.25
    assert snap_speed(7) in SPEEDS
    assert seek_step(100.0) == 1.0
    assert seek_step(3600.0) == 60.0


def test_fmt_t() -> None:
    assert fmt_t(90.25) == "1:30.2"
    assert fmt_t(3725.0) == "1:02:05.0"
    assert fmt_t(None) == "–"


def test_batch_row_status_and_progress() -> None:
    row = BatchRow("b1", {"SUCCESS": 8, "FAILED": 2, "PENDING": 0}, 1.5)
    assert row.total == 10 and row.finished == 10
    assert row.status is not None and row.status.value == "PARTIAL_SUCCESS"
    assert row.label == "PARTIAL_SUCCESS"
    assert BatchRow("b2", {}, None).status is None
    assert BatchRow("b2", {}, None).label == "EMPTY"
    # nothing started yet: the core says RUNNING (work remains), the monitor PENDING
    queued = BatchRow("b3", {"PENDING": 5, "CANCELED": 1}, None)
    assert queued.status is not None and queued.status.value == "RUNNING"
    assert queued.label == "PENDING"
    assert BatchRow("b4", {"PENDING": 5, "RUNNING": 1}, None).label == "RUNNING"


def test_meta_titles_a_simulation_and_a_real_worker() -> None:
    lab = Meta.from_header({"source": "lab", "scenario": "incident", "seed": 7})
    assert lab.title == "incident seed=7"
    real = Meta.from_header({"source": "runtime", "scenario": "sync", "seed": None,
                             "meta": {"worker_id": "host:4242"}})
    assert real.title == "sync on host:4242"
    assert "None" not in Meta.from_header({"source": "runtime"}).title


def test_meta_derives_names_from_series_when_meta_is_missing() -> None:
    header = {"series": ["ds.x.breaker", "ds.x.rps", "pool.p.in_use", "batch.b9.p99"]}
    meta = Meta.from_header(header)
    assert meta.downstreams == ("x",)
    assert meta.pools == ("p",)
    assert meta.batches == ("b9",)


def _model(inc: Incident) -> TraceModel:
    src = TraceSource.open(inc.path)
    assert src.first is not None
    model = TraceModel.of_source(src)
    return model


def test_snapshot_follows_the_gateway_breaker(incident: Incident) -> None:
    model = _model(incident)
    before = model.snapshot(incident.gateway_open - 2)
    # the gateway has no reopen_in series: its time to half-open comes from the next event
    assert model.snapshot(incident.gateway_open + 1).business.reopen_in == pytest.approx(
        incident.gateway_half_open - incident.gateway_open - 1)
    during = model.snapshot(incident.gateway_open + 1)
    after = model.snapshot(incident.gateway_closed + 1)
    assert before.business.breaker == "closed"
    assert during.business.breaker == "open"
    assert during.business.slo_broken
    assert after.business.breaker == "closed"
    partner = model.snapshot(incident.partner_open + 1).downstreams[0]
    assert partner.breaker == "open"
    assert partner.reopen_in is not None
    assert math.isclose(partner.reopen_in, incident.partner_half_open - incident.partner_open - 1,
                        abs_tol=1.0)


def test_snapshot_agrees_with_read_trace(incident: Incident) -> None:
    """The panels read the same numbers a notebook would get from taskfuse.trace."""
    model = _model(incident)
    tr = read_trace(incident.path)
    times, depth = tr.series("queue_depth")
    k = len(times) // 3
    snap = model.snapshot(float(times[k]))
    assert snap.overview.queue_depth == depth[k]
    end = model.snapshot(incident.t_end + 1)
    assert {b.batch_id for b in end.batches} == set(incident.batches)
    assert sum(b.counts["FAILED"] for b in end.batches) == incident.final_counts["FAILED"]
    assert end.alerts == ()
    assert {a.rule for a in model.snapshot(incident.gateway_open + 1).alerts} == {
        "success_rate_low", "queue_depth_high"}


def _tiny_model() -> TraceModel:
    header = {"series": ["queue_depth", "running", "running_limit", "ds.api.r429",
                         "ds.api.breaker", "ds.api.reopen_in", "ds.api.in_flight",
                         "ds.api.limit", "pool.db.in_use", "pool.db.waiting", "pool.db.size",
                         "alerts.firing"],
              "meta": {"workers": 4}}
    model = TraceModel(header)
    rows = [[3, 4, 4, 0, 0, None, 2, 5, 5, 0, 10, 0],
            [9, 4, 4, 10, 2, 30, 5, 5, 10, 3, 10, 1],
            [1, 2, 4, 16, 1, None, 1, 5, 2, 0, 10, 0]]
    model.add_samples(np.array([0.0, 2.0, 4.0]), np.array(rows, dtype=float))
    return model


def test_downstream_row_rates_and_time_to_half_open() -> None:
    model = _tiny_model()
    row = model.snapshot(3.0).downstreams[0]
    assert row.breaker == "open"
    assert row.reopen_in == 29.0  # 30 s at the sample, one second later
    assert row.r429 == 10 and row.r429_rate == 5.0  # (10 - 0) / 2 s
    assert (row.in_flight, row.limit) == (5, 5)
    half = model.snapshot(4.0).downstreams[0]
    assert half.breaker == "half_open" and half.reopen_in is None


def test_pool_rows_and_overview_charts() -> None:
    model = _tiny_model()
    snap = model.snapshot(2.5)
    assert snap.pools[0].name == "db"
    assert (snap.pools[0].in_use, snap.pools[0].waiting, snap.pools[0].size) == (10, 3, 10)
    ov = snap.overview
    assert (ov.queue_depth, ov.running, ov.running_limit) == (9, 4, 4)
    drawn = ov.queue_chart[~np.isnan(ov.queue_chart)]
    assert drawn.max() == 9 and 1 not in drawn  # the sample after the cursor is not drawn


def test_the_loop_lag_at_the_cursor_and_its_largest_so_far() -> None:
    """A trace with the `loop_lag` series (async kinds): the lag at the cursor and the
    largest up to it, not beyond; a trace without the series has neither."""
    model = TraceModel({"series": ["queue_depth", "loop_lag"], "meta": {"workers": 1}})
    model.add_samples(np.array([0.0, 1.0, 2.0, 3.0]),
                      np.array([[0, 0.002], [0, 0.34], [0, 0.012], [0, 0.9]]))
    ov = model.snapshot(2.5).overview
    assert (ov.loop_lag, ov.loop_lag_max) == (0.012, 0.34)
    assert model.snapshot(3.0).overview.loop_lag_max == 0.9
    plain = _tiny_model().snapshot(2.5).overview
    assert (plain.loop_lag, plain.loop_lag_max) == (None, None)


def test_alerts_are_unknown_until_events_are_loaded() -> None:
    model = _tiny_model()
    model.pending_frames = 3
    snap = model.snapshot(2.0)
    assert not snap.alerts_known and snap.alerts_firing == 1
    model.pending_frames = 0
    assert model.snapshot(2.0).alerts_known


@pytest.mark.parametrize("text", ["99:99", "1:60", "1:60:00", "500%", "-5%", "100.5%"])
def test_a_time_that_is_no_time_is_not_taken_for_the_end(text: str) -> None:
    """`:99:99` and `:500%` jumped to the end without a word; now they are no time (the
    app then says so in one warning)."""
    assert parse_time(text, now=50.0, span=(0.0, 100.0)) is None
    assert parse_command(text, 50.0, (0.0, 100.0)).t is None
