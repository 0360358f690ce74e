"""The monitor's speed: open, seek, frame and follow, on a 1,000,000-task trace.

Targets (issue 5): open a 1M-task trace under 1 s, seek under 100 ms, refresh a frame under
50 ms, follow a writer at 5,000 events/s without falling behind.

"Open" is what stands between the command and a usable dashboard: validate the file, walk its
frames, decode the timeline, build the first snapshot. Event frames are only located then and
decoded afterwards on a worker thread (`test_index_all_events` measures that part), so the
task table fills in while the dashboard is already live.

The 1M-task trace is generated once (about half a minute) and kept in pytest's cache dir.

    .venv/bin/python -m pytest benchmarks/test_bench_tui.py --benchmark-only
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from taskfuse.trace import TraceWriter
from tests.tui.tracegen import write_incident_trace
from tui.app import create_app
from tui.model import TraceModel
from tui.sources import TraceSource
from tui.widgets.styling import Panel

N_TASKS = 1_000_000
GEN_VERSION = 1  # bump when tracegen changes what it writes


@pytest.fixture(scope="session")
def big(request: pytest.FixtureRequest) -> Path:
    cache = request.config.cache
    assert cache is not None
    path = cache.mkdir("tui-bench") / f"incident-{N_TASKS}-v{GEN_VERSION}.trace"
    if not path.exists():
        tmp = path.with_suffix(".partial")
        write_incident_trace(tmp, N_TASKS, workers=200, mean_s=0.6, n_batches=10)
        tmp.rename(path)
    return path


def _open(path: Path) -> TraceModel:
    src = TraceSource.open(path)
    model = TraceModel(src.header)
    assert src.first is not None
    model.add_samples(src.first.times, src.first.rows)
    model.pending_frames = src.pending_frames
    model.snapshot(model.span[1] / 2)
    return model


def _loaded(path: Path) -> TraceModel:
    src = TraceSource.open(path)
    model = TraceModel(src.header)
    assert src.first is not None
    model.add_samples(src.first.times, src.first.rows)
    while (chunk := src.decode_next()) is not None:
        model.add_events(chunk, src.pending_frames)
    return model


@pytest.fixture(scope="session")
def big_model(big: Path) -> TraceModel:
    return _loaded(big)


@pytest.mark.benchmark(group="tui-open")
def test_open_1m_trace(benchmark, big: Path) -> None:
    model = benchmark.pedantic(_open, args=(big,), rounds=5, iterations=1)
    benchmark.extra_info["samples"] = model.timeline.n
    benchmark.extra_info["event_frames"] = model.pending_frames
    benchmark.extra_info["file_mb"] = round(big.stat().st_size / 1e6, 1)


@pytest.mark.benchmark(group="tui-open")
def test_index_all_events(benchmark, big: Path) -> None:
    """The background part of opening: every event decoded and indexed (not on the UI path)."""
    model = benchmark.pedantic(_loaded, args=(big,), rounds=1, iterations=1)
    benchmark.extra_info["events"] = model.tasks.n_events
    benchmark.extra_info["tasks"] = model.tasks.n_tasks


@pytest.mark.benchmark(group="tui-seek")
def test_seek_dashboard(benchmark, big_model: TraceModel) -> None:
    rng = np.random.default_rng(1)
    t1 = big_model.span[1]
    benchmark(lambda: big_model.snapshot(float(rng.uniform(0, t1))))


@pytest.mark.benchmark(group="tui-seek")
def test_seek_task_table(benchmark, big_model: TraceModel) -> None:
    """The task view at a new time: counts by state and the newest 300 rows of a state."""
    rng = np.random.default_rng(2)
    t1 = big_model.span[1]
    tasks = big_model.tasks

    def seek() -> int:
        t = float(rng.uniform(0, t1))
        tasks.counts_at(t)
        return tasks.tasks_at(t, "PENDING", limit=300)[1]

    benchmark(seek)


@pytest.mark.benchmark(group="tui-seek")
def test_seek_task_search(benchmark, big_model: TraceModel) -> None:
    """Search by exact task id over 1M tasks, then its history."""
    task = big_model.tasks.words["task_id"][123_456]
    benchmark(lambda: big_model.tasks.history(task))


@pytest.mark.benchmark(group="tui-frame")
def test_frame_refresh(benchmark, big: Path) -> None:
    """Seek, hand every panel its data, and render every panel at its size (120x40).

    Textual's own compositing of the rendered lines is not included; it does not depend on
    the trace's size.
    """
    app = create_app(big)
    rng = np.random.default_rng(3)

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await app.wait_idle()
            await pilot.pause()
            panels = list(app.screen.query(Panel))
            console = Console(width=120, file=io.StringIO(), color_system="truecolor")
            t1 = app.model.span[1]

            def frame() -> None:
                app.seek(float(rng.uniform(0, t1)))
                for panel in panels:
                    size = panel.content_size
                    opts = console.options.update_dimensions(max(1, size.width),
                                                             max(1, size.height))
                    console.render_lines(panel.render(), opts, pad=False)

            benchmark(frame)

    asyncio.run(main())


def _header() -> dict[str, object]:
    return {"source": "runtime", "scenario": "follow-bench", "seed": 0, "sample_interval_s": 0.1,
            "series": ["queue_depth", "running"], "meta": {}}


def _writer_thread(w: TraceWriter, rate: int, seconds: float, flushes_per_s: int,
                   done: threading.Event, closed_at: list[float]) -> threading.Thread:
    def run() -> None:
        per_flush = rate // flushes_per_s
        start, k = time.perf_counter(), 0
        for f in range(int(seconds * flushes_per_s)):
            t = f / flushes_per_s
            for _ in range(per_flush):
                w.event((t, "move", f"t{k}", "b1", f"tr{k // 2}", "PENDING", "RUNNING",
                         "claim", 1, "w1", None, None))
                k += 1
            w.sample(t, [k % 100, 8])
            w.flush()
            pause = start + (f + 1) / flushes_per_s - time.perf_counter()
            if pause > 0:
                done.wait(pause)  # pacing the *writer* at 5,000 events/s
        w.close(None)
        closed_at.append(time.perf_counter())

    return threading.Thread(target=run, daemon=True)


@pytest.mark.benchmark(group="tui-follow")
def test_follow_5000_events_per_second(benchmark, tmp_path: Path) -> None:
    """A writer appends 5,000 events/s for 4 s; the follower polls every 0.25 s as the app
    does. Reported: time spent per poll, events/s it could take, how far behind it ended."""
    rate, seconds = 5_000, 4.0

    def follow() -> dict[str, float]:
        path = tmp_path / f"follow-{time.perf_counter_ns()}.trace"
        stop, closed_at = threading.Event(), []
        writer = TraceWriter(path, _header(), flush_every=10**9)
        thread = _writer_thread(writer, rate, seconds, 10, stop, closed_at)
        src = TraceSource.open(path, follow=True)
        model = TraceModel(src.header)
        thread.start()
        busy, polls = 0.0, 0
        while True:
            t0 = time.perf_counter()
            delta = src.poll()
            model.add_samples(delta.times, delta.rows)
            while (chunk := src.decode_next()) is not None:
                model.add_events(chunk, src.pending_frames)
            busy += time.perf_counter() - t0
            polls += 1
            if src.complete:
                break
            stop.wait(0.25)  # the app's poll timer
        finished = time.perf_counter()
        thread.join()
        assert model.tasks.n_events == int(rate * seconds)
        return {"busy_s_per_poll": busy / polls, "lag_s": finished - closed_at[0],
                "capacity_events_per_s": model.tasks.n_events / busy}

    stats = benchmark.pedantic(follow, rounds=1, iterations=1)
    benchmark.extra_info.update({k: round(v, 4) for k, v in stats.items()})
