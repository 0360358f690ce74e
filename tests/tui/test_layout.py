"""Nothing is cut at 80x24: every panel's text fits its box, every key hint its footer.

Why a test of its own: a cut number looks like a number (`p99 9.` reads as nine seconds).
The check renders each panel's content at its own width and at a much larger one: the same
lines means no line was longer than the box; fewer lines than the box's height means none
fell off the bottom. It runs on every screen, at moments chosen to make the text longest
(breakers open, alerts firing, retries), on the synthetic traces, the lab's own incident,
a real worker's trace and the fleet view.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot

from taskfuse.store.memory import MemoryStore
from tests.tui.fleetgen import NOW, fill_fleet
from tests.tui.screen import Steps, at, cut_panels, footer_cut, screen_text
from tests.tui.tracegen import Incident
from tui.app import create_app
from tui.fleet_app import FleetApp

SIZE = (80, 24)


def check(app: App[int], steps: Steps, size: tuple[int, int] = SIZE) -> list[str]:
    """Run `steps`, then collect everything cut on the screen they led to."""
    found: list[str] = []

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await app.wait_idle()  # type: ignore[attr-defined]
            await steps(pilot)
            await pilot.pause()
            text = screen_text(app)
            found.extend(cut_panels(app))
            found.extend(f"footer lacks {hint!r}" for hint in footer_cut(app))
            if "…" in text:
                found.append("an ellipsis on screen:\n" + text)

    asyncio.run(main())
    return found


def moments(inc: Incident) -> list[float]:
    return [0.0, inc.partner_open + 1, inc.gateway_open + 1, inc.gateway_half_open + 1,
            inc.t_end]


@pytest.mark.parametrize("k", range(5))
def test_dashboard_of_the_incident(incident: Incident, k: int) -> None:
    assert check(create_app(incident.path), at(moments(incident)[k])) == []


@pytest.mark.parametrize("keys", [("t",), ("t", "4"), ("t", "enter"), ("question_mark",),
                                  ("colon", *"skus-5"), ("slash", *"sku-1"),
                                  ("slash", *"sku-1", "enter"), ("slash", *"zzz")],
                         ids=["tasks", "failed", "detail", "help", "jump-prompt",
                              "search-typing", "search-on", "search-miss"])
def test_every_screen(skus: Incident, keys: tuple[str, ...]) -> None:
    assert check(create_app(skus.path), at(skus.gateway_open + 1, *keys)) == []


def test_the_fixed_run_and_the_lab_incident(fixed: Incident, lab_incident: Path) -> None:
    assert check(create_app(fixed.path), at(fixed.t_end / 2)) == []
    for t in (60.0, 120.0, 200.0):
        assert check(create_app(lab_incident), at(t)) == [], t


def test_the_lab_incident_task_detail(lab_incident: Path) -> None:
    assert check(create_app(lab_incident), at(120.0, "colon", *"skus-40", "enter")) == []


@pytest.mark.parametrize("keys", [(), ("w",), ("question_mark",), ("enter",)],
                         ids=["board", "workers", "help", "task"])
def test_the_fleet_view(keys: tuple[str, ...]) -> None:
    store = MemoryStore()
    fill_fleet(store)
    app = FleetApp(store, "postgresql://ops:secret@db.internal:5432/tasks?schema=taskfuse",
                   poll_s=3600, clock=lambda: NOW)

    async def steps(pilot: Pilot[int]) -> None:
        await pilot.press(*keys)
        await app.wait_idle()

    assert check(app, steps) == []


def test_the_check_sees_a_cut_line_and_a_cut_bottom() -> None:
    """The check itself: a panel whose line is one cell too long, or which has one line too
    many, is reported (the old batch line `... p99 9.` would have been)."""
    from rich.text import Text
    from textual.app import ComposeResult

    from tui.widgets.styling import Panel

    class Fixed(Panel):
        DEFAULT_CSS = "Fixed { width: 20; height: 4; border: round white; padding: 0 1; }"

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

        def render(self) -> Text:
            return Text(self.text)

    class Probe(App[int]):
        def compose(self) -> ComposeResult:
            yield Fixed("x" * 16)  # fits: 20 - border - padding = 16
            yield Fixed("batch b1 p99 9.5s")  # 17 cells: the terminal would cut or wrap
            yield Fixed("a\nb\nc")  # 3 lines in 2

    async def main() -> list[str]:
        app = Probe()
        async with app.run_test(size=(40, 20)) as pilot:
            await pilot.pause()
            return cut_panels(app)

    found = asyncio.run(main())
    assert len(found) == 2
    assert "wider than 16" in found[0] and "p99 9.5s" in found[0]
    assert "3 lines in 2" in found[1]


def test_a_real_workers_trace(tmp_path: Path) -> None:
    """The runtime's series (no pools, no business), batches counted from events, a breaker
    open without a time to half-open in the samples, a long worker id in the title."""
    from taskfuse.runtime.tracing import series_names
    from taskfuse.trace import TraceWriter

    names = series_names(["payments-gateway-eu"])
    header = {"source": "runtime", "scenario": "nightly-sync", "seed": None, "series": names,
              "sample_interval_s": 1.0,
              "meta": {"downstreams": ["payments-gateway-eu"], "pools": [], "batches": [],
                       "workers": 16, "slo": {}, "worker_id": "worker-7.prod.internal:48213"}}
    writer = TraceWriter(tmp_path / "real.trace", header)
    for k in range(40):
        batch = f"nightly-2024-06-0{k % 3 + 1}"
        writer.event((float(k), "submit", f"sku-{k}", batch, f"tr-{k}", None, "PENDING", None,
                      1, None, None, None))
        writer.event((k + 0.5, "move", f"sku-{k}", batch, None, "PENDING", "RUNNING", "claim",
                      1, "worker-7.prod.internal:48213/3", None, None))
    writer.event((20.0, "breaker", None, None, None, "closed", "open", "failure rate 0.9",
                  None, None, "payments-gateway-eu", None))
    for t in range(41):
        row = {n: float(t) for n in names}
        row["ds.payments-gateway-eu.breaker"] = 2.0 if t >= 20 else 0.0
        row["ds.payments-gateway-eu.reopen_in"] = None  # type: ignore[assignment]
        writer.sample(float(t), list(row.values()))
    writer.abort()  # still running: no footer
    app = create_app(tmp_path / "real.trace")
    assert check(app, at(30.0)) == []
    assert check(create_app(tmp_path / "real.trace"), at(30.0, "t")) == []
