"""How every monitor view ends, one way for all of them.

`q`, `ctrl+q` and `:q` quit with status 0. Ctrl-C quits with 130, the shell's status of an
interrupted command, whether it arrives as a key (the terminal is in raw mode while the
monitor runs, so Ctrl-C is a keypress) or as SIGINT sent by `kill`. Textual's own ctrl+c
only showed a toast naming ctrl+q, a key the help did not list; SIGINT exited 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

from textual.app import App
from textual.binding import Binding

#: The exit status of a monitor quit by Ctrl-C or SIGINT.
INTERRUPTED = 130

#: The quit keys every monitor app binds (the help lists them as `QUIT_HELP`).
QUIT_BINDINGS = [
    Binding("q", "quit_monitor", "quit"),
    Binding("ctrl+q", "quit_monitor", "quit", show=False, priority=True),
    Binding("ctrl+c", "interrupt", "quit", show=False, priority=True, system=True),
]
QUIT_HELP = (("q ctrl+q", "quit"), ("ctrl+c", "quit, exit status 130"))


def catch_sigint(app: App[int]) -> None:
    """Make SIGINT end `app` with INTERRUPTED (also when the command started with SIGINT
    ignored). Call from on_mount of the app the command runs (not in tests: the handler
    belongs to the process)."""
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not main thread
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, app.exit, INTERRUPTED)
