"""Every screen at 200x60: nothing cut, and the room used for more than at 120x40.

"More" means what a person can read, not bigger bars: more task-table rows, more lines of
events, more running tasks or worker processes, or a panel that only appears with room.
`used()` counts, per panel or table, the lines of content it shows (a table's visible rows);
each screen names the one that must grow from 120x40 to 200x60 (0 means "not shown").
Modal screens (help) are measured by the screen they cover, which is what the extra room
shows around them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable

from taskfuse.core.scheduler import Scheduler, Work
from taskfuse.store.memory import MemoryStore
from tests.tui.fleetgen import NOW, fill_fleet
from tests.tui.screen import Steps, at, cut_panels, footer_cut, rendered_lines, screen_text
from tests.tui.tracegen import Incident
from tui.app import create_app
from tui.fleet_app import FleetApp
from tui.widgets.styling import Panel
from tui.widgets.tasktable import TaskTable

BIG, MID = (200, 60), (120, 40)


def used(screen: Screen[object]) -> dict[str, int]:
    """Lines of content each shown panel or table uses, by class name (summed)."""
    out: dict[str, int] = {}
    for w in [*screen.query(Panel), *screen.query(DataTable)]:
        if not w.display or not w.region.area:
            continue
        width, height = w.content_size
        if isinstance(w, DataTable):
            lines = min(w.row_count, max(0, height - 1))  # the header takes a line
        else:
            lines = min(len(rendered_lines(w.render(), width)), height)
        name = type(w).__name__
        out[name] = out.get(name, 0) + lines
    if isinstance(w := next(iter(screen.query(TaskTable)), None), TaskTable):
        out["TaskTable.page"] = w.page_rows
    return out


def look(app: App[int], steps: Steps, size: tuple[int, int]) -> tuple[list[str], dict[str, int]]:
    """Run `steps` at `size`: what is cut on the screen they led to, and the room it uses."""
    found: list[str] = []
    room: dict[str, int] = {}

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await app.wait_idle()  # type: ignore[attr-defined]
            await steps(pilot)
            for _ in range(200):  # the footer redraws its hints some refreshes after a
                await pilot.pause(0.05)  # screen's bindings change, a panel whose content
                if not footer_cut(app) and not cut_panels(app):  # grew is laid out again
                    break  # some refreshes later: later on a loaded machine (a cut that
                    # stays is still there after the last pause, and fails below)
            found.extend(cut_panels(app))
            found.extend(f"footer lacks {hint!r}" for hint in footer_cut(app))
            if "…" in screen_text(app):
                found.append("an ellipsis on screen")
            under = app.screen_stack[-2] if isinstance(app.screen, ModalScreen) else app.screen
            room.update(used(under))

    asyncio.run(main())
    return found, room


def grows(make: Callable[[], App[int]], steps: Steps, what: str) -> tuple[int, int]:
    """`what`'s lines at 120x40 and 200x60, after checking nothing is cut at 200x60."""
    cut, big = look(make(), steps, BIG)
    assert cut == [], cut
    _, mid = look(make(), steps, MID)
    return mid.get(what, 0), big.get(what, 0)


#: The snapshot test's screens: the keys from the dashboard, and what must use the room.
SCREENS = {
    "dashboard": ((), "RunningPanel"),
    "tasks": (("t",), "TaskTable"),
    "task_detail": (("colon", *"skus-5", "enter"), "EventsPanel"),
    "help": (("question_mark",), "RunningPanel"),
    "prompt_typed": (("colon", *"1:30"), "RunningPanel"),
    "search_match": (("slash", *"sku-1"), "TaskTable"),
    # no match: nothing more to show, but a page of twice the rows is ready for one
    "search_no_match": (("slash", *"sku-zz"), "TaskTable.page"),
}


@pytest.mark.parametrize("screen", list(SCREENS))
def test_every_monitor_screen(skus: Incident, screen: str) -> None:
    keys, what = SCREENS[screen]
    mid, big = grows(lambda: create_app(skus.path), at(skus.gateway_open + 1, *keys), what)
    assert big > mid, (what, mid, big)


def test_the_table_and_detail_show_all_they_can(skus: Incident) -> None:
    """The figures behind the growth: the task table fills its page (55 rows of 200 tasks,
    35 at 120x40); a retried task's detail lists the events while it lived (7 at the
    gateway's open spell: both breakers, two alerts, retries, a cancel)."""
    t = skus.gateway_open + 1
    assert grows(lambda: create_app(skus.path), at(t, "t"), "TaskTable") == (35, 55)
    mid, big = grows(lambda: create_app(skus.path), at(t, "colon", *"skus-80", "enter"),
                     "EventsPanel")
    assert (mid, big) == (0, 7)


@pytest.mark.parametrize("t", [60.0, 200.0])
def test_the_lab_incident(lab_incident: Path, t: float) -> None:
    mid, big = grows(lambda: create_app(lab_incident), at(t), "RunningPanel")
    assert big > mid
    mid, big = grows(lambda: create_app(lab_incident), at(t, "t"), "TaskTable")
    assert big > mid


def _big_fleet() -> FleetApp:
    """The test fleet plus 42 one-thread processes, each running one of the queued tasks:
    50 RUNNING tasks and 44 processes, more than 120x40 has rows for."""
    store = MemoryStore()
    fill_fleet(store)
    sched = Scheduler(store)
    for k in range(42):
        work = sched.claim(f"host-c:{300 + k}/0", NOW - 10, 1)
        assert isinstance(work, Work)
    return FleetApp(store, "postgresql://ops:secret@db.internal:5432/tasks?schema=taskfuse",
                    poll_s=3600, clock=lambda: NOW)


@pytest.mark.parametrize(("keys", "what"), [((), "WorkersTable"), ((), "RunningTable"),
                                            (("w",), "WorkersTable"),
                                            (("question_mark",), "WorkersTable"),
                                            (("enter",), "WorkerPanel")],
                         ids=["board-workers", "board-running", "workers", "help", "task"])
def test_the_fleet_view(keys: tuple[str, ...], what: str) -> None:
    async def steps(pilot: Pilot[int]) -> None:
        await pilot.press(*keys)
        await pilot.app.wait_idle()  # type: ignore[attr-defined]

    mid, big = grows(_big_fleet, steps, what)
    assert big > mid, (what, mid, big)
