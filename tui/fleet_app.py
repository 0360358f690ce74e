"""`lab watch --store URL`: the whole fleet, live, read from the store every poll.

Why a separate app: the trace monitor owns a time cursor over a recorded run; a store has
only "now". This app keeps the same rules: one poller thread runs the store's read-only
queries and only ever posts messages; the handlers here apply them to the model on the UI
thread and hand data down to the screens as attributes. The store is opened read-only: a
watcher never creates, migrates or writes what it watches.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message

from taskfuse.store import StoreURLError, describe_error, redact_url, split_url
from tui.fleet import (
    SLOW_POLL_S,
    BatchMemory,
    FleetModel,
    FleetReads,
    FleetSample,
    Watched,
    idle_repeat,
    look_up,
    poll_store,
    search_count,
)
from tui.fmt import fmt_many
from tui.messages import CommandEntered, PromptClosed, SearchChanged, TaskChosen
from tui.poller import Poller
from tui.quitting import INTERRUPTED, QUIT_BINDINGS, catch_sigint
from tui.screens.fleet import FleetBase, FleetScreen
from tui.screens.fleet_task import FleetTaskScreen
from tui.screens.fleet_workers import FleetWorkersScreen
from tui.screens.help import FLEET_KEYS, HelpScreen
from tui.widgets.fleet import FleetStatus

if TYPE_CHECKING:
    from taskfuse.core.task import Task

#: How often the store is polled (wall seconds) while it changes ...
POLL_S = 1.0
#: ... and at most how rarely while polls find nothing new (each such poll waits 1.5x longer).
POLL_MAX_S = 4.0
#: While polls find nothing new, the board is redrawn at most this often (wall seconds).
QUIET_REDRAW_S = 15.0
VIEWS = {"b": "board", "board": "board", "dash": "board", "d": "board",
         "w": "workers", "workers": "workers", "help": "help", "h": "help", "?": "help"}


class FleetPolled(Message):
    """One poll's answers (posted by the polling thread), with the watched tasks' records."""

    def __init__(self, sample: FleetSample, watched: list[Task] | None = None) -> None:
        super().__init__()
        self.sample = sample
        self.watched = watched


class FleetPollFailed(Message):
    """A poll (or, with `lookup`, a lookup) failed; `error` is free of credentials."""

    def __init__(self, error: str, lookup: bool = False) -> None:
        super().__init__()
        self.error = error
        self.lookup = lookup


class TasksFound(Message):
    """What a lookup found (`look_up`): that task or trace, else the search's tasks."""

    def __init__(self, query: str, found: list[Task], t: float, searched: bool = False) -> None:
        super().__init__()
        self.query = query
        self.found = found
        self.t = t
        self.searched = searched


class SearchCounted(Message):
    """How many tasks a search typed so far finds (up to SEARCH_SHOWN; `more`: past it)."""

    def __init__(self, query: str, n: int, more: bool) -> None:
        super().__init__()
        self.query = query
        self.n = n
        self.more = more


def scrub(error: BaseException, url: str) -> str:
    """An error's first line without the URL's credentials, for the status line."""
    return describe_error(error, url)


class FleetApp(App[int]):
    """Polls one store on a timer: the board, the workers, one task's record and history."""

    CSS_PATH = "monitor.tcss"
    TITLE = "taskfuse fleet"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "prompt('/')", "find task", key_display="/"),
        Binding("colon", "prompt(':')", "command", key_display=":", show=False),
        Binding("w", "view('workers')", "workers"),
        Binding("b", "view('board')", "board", show=False),
        Binding("r", "poll", "poll"),
        Binding("escape", "back", "back", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("T", "toggle_theme", "theme", show=False),
        *QUIT_BINDINGS,
    ]

    def __init__(self, store: FleetReads, url: str, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.time, theme: str = "textual-dark",
                 slow_poll_s: float = SLOW_POLL_S, sigint: bool = False) -> None:
        super().__init__()
        self.sigint = sigint  # SIGINT quits (the command's app; see tui.quitting)
        self.store = store
        self.url = url
        self.shown_url = redact_url(url)
        self.poll_s = poll_s
        self.slow_poll_s = slow_poll_s
        self.clock = clock
        self.model = FleetModel()
        self.polls = 0
        self.error: str | None = None
        self._theme_name = theme
        self._busy = False
        self._jobs = 0  # submitted to the poller, answer not yet handled
        self._idle = asyncio.Event()
        self._idle.set()
        self._poller = Poller("taskfuse-fleet-poll")
        self._batches = BatchMemory()
        self._last_slow: float | None = None
        self._poll_delay = poll_s
        self._quiet = False  # the latest poll found nothing new (`idle_repeat`)
        self._drawn_at = -math.inf  # when the board was last redrawn for a poll (monotonic)
        self._force_draw = False
        self._typed: str | None = None  # the search typed so far, not yet counted
        self._counting = False  # a count of a typed search is on the poller

    def on_mount(self) -> None:
        if self.sigint:
            catch_sigint(self)
        self.theme = self._theme_name
        self.sub_title = self.shown_url
        self.install_screen(FleetScreen(self.model), "board")
        self.install_screen(FleetWorkersScreen(self.model), "workers")
        self.push_screen("board")
        self.poll_now()
        self.set_timer(self.poll_s, self._poll_tick)

    def _poll_tick(self) -> None:
        """The poll timer: at `poll_s` while the store changes, backing off to POLL_MAX_S
        while polls find nothing new (an idle store then costs next to nothing)."""
        self.poll_now()
        slowest = max(self.poll_s, POLL_MAX_S)
        self._poll_delay = min(self._poll_delay * 1.5, slowest) if self._quiet else self.poll_s
        self.set_timer(self._poll_delay, self._poll_tick)

    def on_unmount(self) -> None:
        self._poller.close()

    # -- polling (the thread only posts messages) -----------------------------------------

    def poll_now(self, slow: bool | None = None) -> None:
        """Start a poll unless one is still running (a slow store must not pile them up).
        `slow` asks the slow questions too (by default every `slow_poll_s`)."""
        self._sync_status()
        if self._busy or not self.screen_stack:  # still polling, or closing
            return
        now = self.clock()
        if slow is None:
            slow = self._last_slow is None or now - self._last_slow >= self.slow_poll_s
        if slow:
            self._last_slow = now
        watched = self.screen.watched.query if isinstance(self.screen, FleetTaskScreen) \
            else None
        self._busy = True
        self._submit(lambda: self._poll(now, slow, watched))

    def _submit(self, job: Callable[[], None]) -> None:
        """Hand a job (which posts exactly one answer) to the poller thread."""
        self._jobs += 1
        self._idle.clear()
        self._poller.submit(job)

    def _answered(self) -> None:
        self._jobs -= 1
        if not self._jobs:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until every poll and lookup asked for has been applied (for tests)."""
        await self._idle.wait()

    def _poll(self, now: float, slow: bool, watched: str | None) -> None:
        """On the poller thread."""
        try:
            sample = poll_store(self.store, now, slow, self._batches)
            found = look_up(self.store, watched)[0] if watched is not None else None
            self.post_message(FleetPolled(sample, found))
        except Exception as exc:  # a store outage is shown, never raised into the UI
            self.post_message(FleetPollFailed(scrub(exc, self.url)))

    def _find(self, query: str) -> None:
        """On the poller thread."""
        try:
            tasks, searched = look_up(self.store, query)
        except Exception as exc:
            self.post_message(FleetPollFailed(scrub(exc, self.url), lookup=True))
            return
        self.post_message(TasksFound(query, tasks, self.clock(), searched))

    def _count(self, query: str) -> None:
        """On the poller thread."""
        try:
            n, more = search_count(self.store, query)
        except Exception as exc:
            self.post_message(FleetPollFailed(scrub(exc, self.url), lookup=True))
            return
        self.post_message(SearchCounted(query, n, more))

    def on_fleet_polled(self, message: FleetPolled) -> None:
        self._quiet = idle_repeat(self.model.latest, message.sample) and self.error is None
        self.model.add(message.sample)
        self.polls += 1
        self.error = None
        screen = self.screen
        if message.watched is not None and isinstance(screen, FleetTaskScreen):
            screen.watched.update(message.watched, message.sample.t)
            self._quiet = False
        now = time.monotonic()
        if self._quiet and not self._force_draw and now - self._drawn_at < QUIET_REDRAW_S:
            self._busy = False
            self._sync_status()  # nothing the board shows changed but the poll's time
            self._answered()
            return
        self._drawn_at, self._force_draw = now, False
        self._done()

    def on_fleet_poll_failed(self, message: FleetPollFailed) -> None:
        self.error = message.error
        if message.lookup:
            self._counting = False
            self._sync()
            self._answered()
        else:
            self._done()

    def _done(self) -> None:
        self._busy = False
        self._sync()
        self._answered()

    def status(self) -> FleetStatus:
        latest = self.model.latest
        since = None if latest is None else max(0.0, self.clock() - latest.t)
        return FleetStatus(self.shown_url, self.polls, since, self.poll_s, self.error)

    def _sync(self) -> None:
        screen = self.screen if self.screen_stack else None
        if isinstance(screen, FleetBase):
            screen.show(self.status())

    def _sync_status(self) -> None:
        screen = self.screen if self.screen_stack else None
        if isinstance(screen, FleetBase):
            screen.show_status(self.status())

    # -- lookups, views and keys -----------------------------------------------------------

    async def on_tasks_found(self, message: TasksFound) -> None:
        if not message.found:
            self.notify(f"no task id, trace, kind, batch or key in the store holds "
                        f"{message.query!r}", severity="warning")
        else:
            await self.push_screen(FleetTaskScreen(self.model, Watched(
                message.query, message.found, message.t, message.searched)))
            self._sync()
        self._answered()

    # -- the search typed so far: its count on the prompt, one query on the poller at a time

    @on(SearchChanged)
    def _search_changed(self, message: SearchChanged) -> None:
        self._typed = message.text.strip()
        self._count_typed()

    @on(PromptClosed)
    def _prompt_closed(self, message: PromptClosed) -> None:
        self._typed = None

    def _count_typed(self) -> None:
        """Count the latest text typed, unless a count is on the poller (its answer asks
        again): typing fast sends one query per answer, not one per key."""
        if self._counting or self._typed is None:
            return
        query, self._typed = self._typed, None
        if not query:
            self._show_count("", False)
            return
        self._counting = True
        self._submit(lambda: self._count(query))

    def on_search_counted(self, message: SearchCounted) -> None:
        self._counting = False
        if self._typed is None:  # the answer is for what the prompt holds now
            n = f"{message.n}+ tasks" if message.more else fmt_many(message.n, "task")
            self._show_count(n if message.n else "no match", not message.n)
        self._count_typed()
        self._answered()

    def _show_count(self, text: str, miss: bool) -> None:
        if isinstance(self.screen, FleetBase):
            self.screen.show_search(text, miss)

    @on(CommandEntered)
    async def _command(self, message: CommandEntered) -> None:
        text = message.text.strip()
        low = text.lower()
        self._typed = None
        if message.mode == ":" and low in ("q", "quit", "q!"):
            self.exit(0)
            return
        if message.mode == ":" and low in VIEWS:
            await self.action_view(VIEWS[low])
            return
        if message.mode == ":" and low.startswith("task "):
            text = text[5:].strip()
        if text:
            self._submit(lambda: self._find(text))

    @on(TaskChosen)
    def _chosen(self, message: TaskChosen) -> None:
        task = message.task_id
        self._submit(lambda: self._find(task))

    def action_prompt(self, mode: str) -> None:
        if isinstance(self.screen, FleetBase):
            self.screen.open_prompt(mode)

    def action_poll(self) -> None:
        self._force_draw = True  # asked for: redraw whatever the answer
        self.poll_now(slow=True)

    async def action_view(self, name: str) -> None:
        if name == "help":
            self.action_help()
            return
        while len(self.screen_stack) > 2:
            await self.pop_screen()
        if self.screen is not self.get_screen(name):
            await self.switch_screen(name)
        if name == "workers" and self.model.workers is None:
            self.poll_now(slow=True)
        self._sync()

    async def action_back(self) -> None:
        if len(self.screen_stack) > 2:
            await self.pop_screen()
        elif self.screen is not self.get_screen("board"):
            await self.switch_screen("board")
        self._sync()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(FLEET_KEYS, "fleet keys"), lambda _: self._sync())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_quit_monitor(self) -> None:
        self.exit(0)

    def action_interrupt(self) -> None:
        self.exit(INTERRUPTED)


class FleetOpenError(Exception):
    """The store of `--store URL` cannot be watched; the message names it redacted."""


def open_fleet(url: str, poll_s: float = POLL_S, theme: str | None = None,
               clock: Callable[[], float] = time.time, sigint: bool = False) -> FleetApp:
    """Open the store read-only and build the app; raises FleetOpenError (never with
    credentials).

    Watching must not create what it watches: a missing SQLite file, a file or a schema
    without a taskfuse store is an error, and memory:// (private to the process that made
    it) is refused.
    """
    from taskfuse.store import open_store

    shown = redact_url(url)
    try:
        parts = split_url(url)
    except StoreURLError as exc:
        raise FleetOpenError(str(exc)) from None
    if parts.scheme == "memory":
        raise FleetOpenError(f"{shown}: a memory store lives inside one process; watch "
                             "sqlite:///PATH or postgresql://...")
    if parts.scheme == "sqlite" and parts.path[1:] and not Path(parts.path[1:]).is_file():
        raise FleetOpenError(f"{shown}: no such SQLite store file")
    if poll_s <= 0:
        raise FleetOpenError(f"poll interval must be > 0 seconds, got {poll_s!r}")
    try:
        store = open_store(url, read_only=True)
    except Exception as exc:  # an unreachable or unknown store is one line, never a traceback
        raise FleetOpenError(scrub(exc, url)) from None
    themes = {"dark": "textual-dark", "light": "textual-light"}
    return FleetApp(store, url, poll_s=poll_s, clock=clock,  # type: ignore[arg-type]
                    theme=themes.get(theme or "dark", theme or "textual-dark"), sigint=sigint)
