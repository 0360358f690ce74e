"""`lab watch --store URL`: the whole fleet, live, read from the store every poll.

Why a separate app: the trace monitor owns a time cursor over a recorded run; a store has
only "now". This app keeps the same rules: a worker thread runs the store's read-only
queries and only ever posts messages; the handlers here apply them to the model on the UI
thread and hand data down to the screen as attributes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlsplit

from textual import on, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message

from taskfuse.store import describe_error, redact_url
from tui.fleet import FleetModel, FleetSample, poll_store, task_lines
from tui.messages import CommandEntered, TaskChosen
from tui.screens.fleet import FleetScreen, FleetTaskScreen
from tui.widgets.fleet import FleetStatus

if TYPE_CHECKING:
    from taskfuse.core.storeapi import Store

#: How often the store is polled (wall seconds).
POLL_S = 1.0


class FleetPolled(Message):
    """One poll's answers (posted by the polling thread)."""

    def __init__(self, sample: FleetSample) -> None:
        super().__init__()
        self.sample = sample


class FleetPollFailed(Message):
    """A poll or a lookup failed; `error` is already free of credentials."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class TasksFound(Message):
    """What `store.find` answered for a task_id or trace_id."""

    def __init__(self, query: str, found: list[list[tuple[str, str]]]) -> None:
        super().__init__()
        self.query = query
        self.found = found


def scrub(error: BaseException, url: str) -> str:
    """An error's first line without the URL's credentials, for the status line."""
    return describe_error(error, url)


class FleetApp(App[int]):
    """Polls one store on a timer and shows queue, running, states, batches, RUNNING tasks."""

    CSS_PATH = "monitor.tcss"
    TITLE = "taskfuse fleet"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "prompt('/')", "find task", key_display="/"),
        Binding("colon", "prompt(':')", "command", key_display=":"),
        Binding("r", "poll", "poll now"),
        Binding("escape", "back", "back", show=False),
        Binding("T", "toggle_theme", "theme", show=False),
        Binding("q", "quit_monitor", "quit"),
    ]

    def __init__(self, store: Store, url: str, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.time, theme: str = "textual-dark") -> None:
        super().__init__()
        self.store = store
        self.url = url
        self.shown_url = redact_url(url)
        self.poll_s = poll_s
        self.clock = clock
        self.model = FleetModel()
        self.polls = 0
        self.error: str | None = None
        self._theme_name = theme
        self._busy = False
        self._idle = asyncio.Event()

    def on_mount(self) -> None:
        self.theme = self._theme_name
        self.sub_title = self.shown_url
        self.install_screen(FleetScreen(self.model), "fleet")
        self.push_screen("fleet")
        self.set_interval(self.poll_s, self.poll_now)
        self.poll_now()

    # -- polling (the thread only posts messages) -----------------------------------------

    def poll_now(self) -> None:
        """Start a poll unless one is still running (a slow store must not pile them up)."""
        self._sync()
        if not self._busy:
            self._busy = True
            self._idle.clear()
            self._poll()

    async def wait_idle(self) -> None:
        """Wait until the current poll has been applied (for tests)."""
        await self._idle.wait()

    @work(thread=True, group="poll", exit_on_error=False)
    def _poll(self) -> None:
        try:
            self.post_message(FleetPolled(poll_store(self.store, self.clock())))
        except Exception as exc:  # a store outage is shown, never raised into the UI
            self.post_message(FleetPollFailed(scrub(exc, self.url)))

    @work(thread=True, group="find", exit_on_error=False)
    def _find(self, query: str) -> None:
        try:
            tasks = self.store.find(query)
        except Exception as exc:
            self.post_message(FleetPollFailed(scrub(exc, self.url)))
            return
        now = self.clock()
        self.post_message(TasksFound(query, [task_lines(t, now) for t in tasks]))

    def on_fleet_polled(self, message: FleetPolled) -> None:
        self.model.add(message.sample)
        self.polls += 1
        self.error = None
        self._done()

    def on_fleet_poll_failed(self, message: FleetPollFailed) -> None:
        self.error = message.error
        self._done()

    def _done(self) -> None:
        self._busy = False
        self._sync()
        self._idle.set()

    def status(self) -> FleetStatus:
        latest = self.model.latest
        since = None if latest is None else max(0.0, self.clock() - latest.t)
        return FleetStatus(self.shown_url, self.polls, since, self.poll_s, self.error)

    def _sync(self) -> None:
        screen = self.get_screen("fleet") if self.is_screen_installed("fleet") else None
        if isinstance(screen, FleetScreen):
            screen.show(self.status())

    # -- lookups and keys ------------------------------------------------------------------

    def on_tasks_found(self, message: TasksFound) -> None:
        if not message.found:
            self.notify(f"no task or trace {message.query!r}", severity="warning")
            return
        self.push_screen(FleetTaskScreen(message.query, message.found))

    @on(CommandEntered)
    def _command(self, message: CommandEntered) -> None:
        text = message.text.strip()
        if message.mode == ":" and text.lower() in ("q", "quit", "q!"):
            self.exit(0)
            return
        if message.mode == ":" and text.lower().startswith("task "):
            text = text[5:].strip()
        if text:
            self._find(text)

    @on(TaskChosen)
    def _chosen(self, message: TaskChosen) -> None:
        self._find(message.task_id)

    def action_prompt(self, mode: str) -> None:
        if isinstance(self.screen, FleetScreen):
            self.screen.open_prompt(mode)

    def action_poll(self) -> None:
        self.poll_now()

    async def action_back(self) -> None:
        if len(self.screen_stack) > 2:
            await self.pop_screen()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_quit_monitor(self) -> None:
        self.exit(0)


class FleetOpenError(Exception):
    """The store of `--store URL` cannot be watched; the message names it redacted."""


def open_fleet(url: str, poll_s: float = POLL_S, theme: str | None = None,
               clock: Callable[[], float] = time.time) -> FleetApp:
    """Open the store and build the app; raises FleetOpenError (never with credentials).

    Watching must not create what it watches: a missing SQLite file is an error, not a new
    empty store, and memory:// (private to the process that made it) is refused.
    """
    from taskfuse.store import open_store

    shown = redact_url(url)
    parts = urlsplit(url)
    if parts.scheme == "memory":
        raise FleetOpenError(f"{shown}: a memory store lives inside one process; watch "
                             "sqlite:///PATH or postgresql://...")
    if parts.scheme == "sqlite" and parts.path[1:] and not Path(parts.path[1:]).is_file():
        raise FleetOpenError(f"{shown}: no such SQLite store file")
    if poll_s <= 0:
        raise FleetOpenError(f"poll interval must be > 0 seconds, got {poll_s!r}")
    try:
        store = open_store(url)
    except Exception as exc:  # an unreachable or unknown store is one line, never a traceback
        raise FleetOpenError(scrub(exc, url)) from None
    themes = {"dark": "textual-dark", "light": "textual-light"}
    return FleetApp(store, url, poll_s=poll_s, clock=clock,
                    theme=themes.get(theme or "dark", theme or "textual-dark"))
