"""The monitor app: owns the time cursor and the data; screens and widgets only render.

`create_app` is the one factory: the `lab watch` command (through `run_watch`) and the tests
build the app the same way. The app's jobs are few and kept here on purpose:

* playback — a cursor in trace time, moved by keys, by `:` jumps and, while playing, by
  `speed` x the frame interval on a timer (the app advances trace time; no widget reads a
  clock, they render the time the app hands them). Three states, one indicator: LIVE (a
  followed run, the cursor riding its end), playing, paused; space moves between them;
* loading — a worker thread decodes the trace's event frames and only ever posts messages;
  the handlers below apply them to the model on the UI thread. Following checks the file
  with one `stat` per tick and reads only when it changed; while nothing changes the ticks
  back off to `POLL_MAX_S`, so an idle follow costs next to nothing. A file that grows by
  nothing but repeats of its latest sample (an idle real worker samples every second) counts
  as unchanged: the ticks keep backing off (to `QUIET_POLL_MAX_S`), only the time bar
  moves, and the panels are redrawn at most every `QUIET_REDRAW_S`;
* navigation — k9s/htop keys: `?` help, `/` search, `:` jump, esc back, q quit.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input
from textual.worker import get_current_worker

from taskfuse.trace import TraceError
from tui.commands import parse_command
from tui.fmt import fmt_many, fmt_pct
from tui.messages import (
    CommandEntered,
    EventsDecoded,
    PromptClosed,
    PumpFinished,
    SearchChanged,
    SourceFailed,
    SourceStalled,
    TaskChosen,
    TraceGrew,
)
from tui.quitting import INTERRUPTED, QUIT_BINDINGS, catch_sigint
from tui.screens.base import MonitorScreen
from tui.screens.dashboard import DashboardScreen
from tui.screens.help import HelpScreen
from tui.screens.task_detail import TaskDetailScreen
from tui.screens.tasks import TasksScreen
from tui.sources import Delta, TraceSource
from tui.trace_model import PlayInfo, TraceModel, check_speed, next_speed, seek_step, snap_speed

#: Playback frame interval (wall seconds); each frame moves the cursor speed x this.
FRAME_S = 0.1
#: How often a followed trace is checked while it grows (wall seconds) ...
POLL_S = 0.25
#: ... and at most how rarely while it does not (each idle check waits 1.5x longer).
POLL_MAX_S = 2.0
#: ... or this, while the file grows by repeats of its latest sample only (the time bar of an
#: idle worker's run moves in such steps; reading each second's repeat cost 1.5 % of a core).
QUIET_POLL_MAX_S = 5.0
#: While a followed run only repeats its latest sample, panels are redrawn at most this often
#: (wall seconds; about one chart column at 80 columns on a run of ten minutes).
QUIET_REDRAW_S = 15.0
THEMES = {"dark": "textual-dark", "light": "textual-light"}
_PLAYBACK = {"toggle_play", "speed", "step", "home", "end"}


class MonitorApp(App[int]):
    """Replays or follows one trace."""

    CSS_PATH = "monitor.tcss"
    TITLE = "taskfuse monitor"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_play", "play", priority=True),
        Binding("plus,equals_sign", "speed(1)", "faster", priority=True, key_display="+"),
        Binding("minus", "speed(-1)", "slower", priority=True, key_display="-", show=False),
        Binding("left", "step(-1)", "back", priority=True, show=False),
        Binding("right", "step(1)", "fwd", priority=True, show=False),
        Binding("shift+left", "step(-10)", "back x10", priority=True, show=False),
        Binding("shift+right", "step(10)", "fwd x10", priority=True, show=False),
        Binding("home", "home", "start", priority=True, show=False),
        Binding("end", "end", "end", priority=True, show=False),
        Binding("colon", "prompt(':')", "jump", key_display=":"),
        Binding("slash", "prompt('/')", "search", key_display="/"),
        Binding("t", "view('tasks')", "tasks"),
        Binding("d", "view('dashboard')", "dash", show=False),
        Binding("escape", "back", "back", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("T", "toggle_theme", "theme", show=False),
        *QUIT_BINDINGS,
    ]

    def __init__(self, source: TraceSource, speed: float = 1.0, theme: str | None = None,
                 poll_s: float = POLL_S, sigint: bool = False) -> None:
        super().__init__()
        self.sigint = sigint  # SIGINT quits (the command's app; see tui.quitting)
        self.source = source
        self.model = TraceModel(source.header)
        self.speed = snap_speed(speed)
        self.poll_s = poll_s
        self.playing = False
        self.live = source.follow
        self.stalled_for: float | None = None
        self.error: str | None = None
        self.t = 0.0
        self.polls = 0  # reads of a followed file (a check that found no change is not one)
        #: The end of a followed run at the last playback frame: what it grew by since is
        #: added to the frame, so playing a followed run closes the gap instead of widening it.
        self._end_seen: float | None = None
        self._theme_name = THEMES.get(theme or "dark", theme or "textual-dark")
        self._frame_timer: Timer | None = None
        self._poll_delay = poll_s
        self._quiet = False  # the latest read only repeated the latest sample
        self._drawn_at = -math.inf  # when the panels were last redrawn for a read (wall s)
        self._busy = False
        self._idle = asyncio.Event()
        first = source.first
        if first is not None:
            self._apply_delta_data(first)
        t0, t1 = self.model.span
        self.t = t1 if source.follow else t0

    # -- lifecycle ------------------------------------------------------------------------

    def on_mount(self) -> None:
        if self.sigint:
            catch_sigint(self)
        self.theme = self._theme_name
        self.install_screen(DashboardScreen(self.model), "dashboard")
        self.install_screen(TasksScreen(self.model), "tasks")
        self.push_screen("dashboard")
        self._frame_timer = self.set_interval(FRAME_S, self._frame, pause=True)
        if self.source.follow:
            self.set_timer(self.poll_s, self._poll_tick)
        self._busy = True  # loading starts once the first screen is on the terminal: the
        self._idle.clear()  # decoding thread competes with the UI for the interpreter
        self.call_after_refresh(self._first_screen_shown)

    def _first_screen_shown(self) -> None:
        self._sync()
        self._start_pump(poll=False)

    @property
    def events_loaded(self) -> bool:
        """True once every event frame read so far is in the model (tests wait on this)."""
        return self.model.events_loaded and not self._busy

    def _start_pump(self, poll: bool) -> None:
        self._busy = True
        self._idle.clear()
        self._pump(poll)

    async def wait_idle(self) -> None:
        """Wait until the loading thread's current round has been applied (for tests)."""
        await self._idle.wait()

    @work(thread=True, exclusive=False, group="source", exit_on_error=False)
    def _pump(self, poll: bool) -> None:
        """On a worker thread: read new frames (when polling) and decode event frames."""
        worker = get_current_worker()
        try:
            if poll:
                delta = self.source.poll()
                if delta.stalled_for is not None:
                    self.post_message(SourceStalled(delta.stalled_for))
                if delta.grew:
                    self.post_message(TraceGrew(delta))
            while not worker.is_cancelled:
                chunk = self.source.decode_next()
                if chunk is None:
                    break
                self.post_message(EventsDecoded(chunk, self.source.pending_frames,
                                                self.source.pending_bytes))
        except TraceError as exc:
            self.post_message(SourceFailed(str(exc)))
        self.post_message(PumpFinished())

    def _poll_tick(self) -> None:
        """The follow timer: read when the file changed, else back off (see module doc)."""
        changed = self.poll_now() and not self._quiet
        slowest = QUIET_POLL_MAX_S if self._quiet else POLL_MAX_S
        self._poll_delay = self.poll_s if changed else min(self._poll_delay * 1.5, slowest)
        if not self.source.complete and self.error is None:
            self.set_timer(self._poll_delay, self._poll_tick)

    def poll_now(self) -> bool:
        """Read what the followed file gained, if it changed (the follow timer calls this; so
        can tests). Answers whether it started a read."""
        if self._busy or self.error is not None:
            return self._busy
        if self.source.changed():
            self.polls += 1
            self._start_pump(poll=True)
            return True
        stalled = self.source.stalled_for()
        if (stalled is None) != (self.stalled_for is None) or (
                stalled is not None and self.stalled_for is not None
                and int(stalled) != int(self.stalled_for)):
            self.stalled_for = stalled
            self._sync_bar()
        return False

    # -- data from the loading thread -----------------------------------------------------

    def _apply_delta_data(self, delta: Delta) -> None:
        self.model.add_samples(delta.times, delta.rows)
        self.model.add_event_frames(delta.new_event_frames, delta.new_event_bytes)
        if delta.complete:
            self.model.finish(delta.report)

    def on_trace_grew(self, message: TraceGrew) -> None:
        delta = message.delta
        self.stalled_for = None
        self._quiet = (not delta.new_event_frames and not delta.complete
                       and self.model.timeline.repeats(delta.rows))
        self._apply_delta_data(delta)
        if not self._quiet:
            self._poll_delay = self.poll_s  # the run moves: check often again
        if self.live:
            self.t = self.model.span[1]
        now = self.source.clock()
        if self._quiet and now - self._drawn_at < QUIET_REDRAW_S:
            self._sync_bar()  # nothing a panel shows changed: only the time moved
            return
        self._drawn_at = now
        self._sync()

    def on_pump_finished(self, message: PumpFinished) -> None:
        self._busy = False
        self._idle.set()
        if self._quiet:
            self._sync_bar()
        else:
            self._sync()

    def on_events_decoded(self, message: EventsDecoded) -> None:
        self.model.add_events(message.chunk, message.pending, message.pending_bytes)
        if self.live:
            self.t = self.model.span[1]
        if message.pending == 0 or message.pending % 8 == 0:
            self._sync()

    def on_source_stalled(self, message: SourceStalled) -> None:
        self.stalled_for = message.seconds
        self._sync_bar()

    def on_source_failed(self, message: SourceFailed) -> None:
        self.error = message.error
        self.notify(message.error, title="trace", severity="error", timeout=10)
        self._sync()

    # -- the cursor -----------------------------------------------------------------------

    def seek(self, t: float, live: bool | None = None) -> None:
        """Move the cursor (clamped to the run); every screen follows it. A followed run is
        LIVE again when the cursor reaches its end."""
        t0, t1 = self.model.span
        self.t = min(max(t, t0), t1)
        self.live = (self.source.follow and self.t >= t1) if live is None else live
        if self.live:
            self._stop_playing()
        self._sync()

    def advance(self, seconds: float) -> None:
        """Move forward `seconds` of wall time at the current speed (one playback frame).

        Playing a followed run moves also by what the run grew since the last frame: a paced
        simulation grows faster than x1, and playback at the speed shown alone would fall
        further behind the longer it played. So the gap to the live end shrinks at the speed
        shown, and playback reaches LIVE."""
        t1 = self.model.span[1]
        grew = 0.0
        if self.source.follow and self._end_seen is not None:
            grew = max(0.0, t1 - self._end_seen)
        self._end_seen = t1
        target = self.t + seconds * self.speed + grew
        if target >= t1:
            self._stop_playing()
        self.seek(target)

    def _stop_playing(self) -> None:
        self.playing = False
        if self._frame_timer is not None:
            self._frame_timer.pause()

    def _frame(self) -> None:
        if self.playing:
            self.advance(FRAME_S)

    def info(self) -> PlayInfo:
        m = self.model
        return PlayInfo(
            self.t, m.span, self.playing, self.speed, self.source.follow, self.live,
            m.complete, self.stalled_for, m.loaded, m.meta.title, self.error,
        )

    def _sync(self) -> None:
        """Hand the cursor and play state down to the screen(s) showing."""
        info = self.info()
        for screen in self._showing():
            screen.info = info
            if screen.t != self.t:
                screen.t = self.t
            else:
                screen.show()

    def _sync_bar(self) -> None:
        """Only the time bar changed (a stall's seconds): no panel is recomputed."""
        info = self.info()
        for screen in self._showing():
            screen.info = info

    def _showing(self) -> list[MonitorScreen]:
        stack = [s for s in self.screen_stack if isinstance(s, MonitorScreen)]
        return stack[-1:]

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Playback keys are priority bindings; let them through to a focused prompt."""
        return not (action in _PLAYBACK and isinstance(self.focused, Input))

    def action_toggle_play(self) -> None:
        """LIVE -> paused (the cursor stays); paused -> playing, or LIVE again at the end of
        a followed run; playing -> paused. A finished replay starts over."""
        t0, t1 = self.model.span
        if self.live or self.playing:
            self.live = False
            self._stop_playing()
        elif self.source.follow and self.t >= t1:
            self.live = True
        else:
            if self.t >= t1:
                self.t = t0
            self.playing = True
            self._end_seen = t1  # what the run grew while paused is the gap, not a frame
            if self._frame_timer is not None:
                self._frame_timer.resume()
        self._sync()

    def action_speed(self, direction: int) -> None:
        self.speed = next_speed(self.speed, direction > 0)
        self._sync()

    def action_step(self, steps: int) -> None:
        t0, t1 = self.model.span
        self.seek(self.t + steps * seek_step(t1 - t0))

    def action_home(self) -> None:
        self.seek(self.model.span[0])

    def action_end(self) -> None:
        self.seek(self.model.span[1], live=self.source.follow)

    @property
    def tasks_screen(self) -> TasksScreen:
        screen = self.get_screen("tasks")
        assert isinstance(screen, TasksScreen)
        return screen

    async def action_prompt(self, mode: str) -> None:
        if mode == "/" and not isinstance(self.screen, TasksScreen):
            await self.action_view("tasks")
        if isinstance(self.screen, MonitorScreen):
            text = self.tasks_screen.query_text if mode == "/" else ""
            self.screen.open_prompt(mode, text)
            if mode == "/":
                self.tasks_screen.show()

    async def action_view(self, name: str) -> None:
        while len(self.screen_stack) > 2:
            await self.pop_screen()
        if name == "help":
            self.action_help()
            return
        if name == "dashboard":  # a search belongs to the task table; it does not linger
            self.tasks_screen.clear_filters()
        target = self.get_screen(name)
        if self.screen is not target:
            if isinstance(target, MonitorScreen):  # its first rows are at the cursor's time
                target.t = self.t
            await self.switch_screen(name)
        self._sync()

    async def action_back(self) -> None:
        if len(self.screen_stack) > 2:
            await self.pop_screen()
        elif isinstance(self.screen, TasksScreen):
            if self.screen.clear_filters():
                return
            await self.switch_screen("dashboard")
        self._sync()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(), lambda _: self._sync())

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_quit_monitor(self) -> None:
        self.exit(0)

    def action_interrupt(self) -> None:
        self.exit(INTERRUPTED)

    # -- messages from screens ------------------------------------------------------------

    @on(SearchChanged)
    def _search_changed(self, message: SearchChanged) -> None:
        self.tasks_screen.query_text = message.text.strip()

    @on(PromptClosed)
    def _prompt_closed(self, message: PromptClosed) -> None:
        if message.mode == "/":  # esc while typing a search clears it
            self.tasks_screen.query_text = ""
            self.tasks_screen.show()

    @on(CommandEntered)
    async def _command(self, message: CommandEntered) -> None:
        if message.mode == "/":
            if not isinstance(self.screen, TasksScreen):
                await self.action_view("tasks")
            self.tasks_screen.query_text = message.text.strip()
            self.tasks_screen.show()
            return
        cmd = parse_command(message.text, self.t, self.model.span)
        if cmd.quit:
            self.exit(0)
        elif cmd.view:
            await self.action_view(cmd.view)
        elif cmd.task:
            await self._lookup(cmd.task)
        elif cmd.t is not None:
            self.seek(cmd.t)

    @on(TaskChosen)
    async def _task_chosen(self, message: TaskChosen) -> None:
        await self._drill(message.task_id)

    async def _lookup(self, query: str) -> None:
        """`:ID`: a task id or trace id opens its history; a part of ids that several tasks
        share opens the task table searched for it; anything else is one warning line."""
        task = self.model.tasks.resolve(query)
        if task is not None:
            await self._drill(task)
            return
        found = self.model.tasks.search(query)
        if len(found.codes):
            await self.action_view("tasks")
            self.tasks_screen.query_text = query
            self.notify(f"{fmt_many(len(found.codes), 'task')} match {query!r}: "
                        "enter opens the highlighted one", timeout=4)
            return
        loading = "" if self.model.events_loaded else \
            f" (events loaded so far: {fmt_pct(self.model.loaded)})"
        self.notify(f"{query!r} is no view, time, task or trace{loading}; try 90, 1:30, "
                    "+10, 50%, tasks, or a task id", severity="warning")

    async def _drill(self, task: str) -> None:
        screen: Screen[None] = TaskDetailScreen(self.model, task)
        await self.push_screen(screen)
        self._sync()


def create_app(
    path: str | Path,
    follow: bool = False,
    speed: float = 1.0,
    theme: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = POLL_S,
    sigint: bool = False,
) -> MonitorApp:
    """Open the trace and build the app; raises TraceError or ValueError (a bad speed or
    theme)."""
    check_speed(speed)
    if theme is not None and theme not in THEMES and theme not in _known_themes():
        raise ValueError(f"unknown theme {theme!r} (use light, dark or a Textual theme name)")
    source = TraceSource.open(path, follow=follow, clock=clock)
    return MonitorApp(source, speed=speed, theme=theme, poll_s=poll_s, sigint=sigint)


def _known_themes() -> set[str]:
    from textual.theme import BUILTIN_THEMES

    return set(BUILTIN_THEMES)


def run_watch(
    path: str, follow: bool = False, speed: float = 1.0, theme: str | None = None
) -> int:
    """Run the monitor on `path`; 0 on a normal quit, 2 (one line on stderr) on a bad trace."""
    try:
        app = create_app(path, follow=follow, speed=speed, theme=theme, sigint=True)
    except (TraceError, ValueError) as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    result = app.run()
    return 0 if result is None else int(result)


def run_fleet(url: str, poll_s: float = 1.0, theme: str | None = None) -> int:
    """Watch a whole fleet live from its store; 2 (one line on stderr) if it cannot be read."""
    from tui.fleet_app import FleetOpenError, open_fleet

    try:
        app = open_fleet(url, poll_s=poll_s, theme=theme, sigint=True)
    except FleetOpenError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 2
    try:
        result = app.run()
    finally:
        close = getattr(app.store, "close", None)
        if close is not None:
            close()
    return 0 if result is None else int(result)
