"""What every command line (`taskfuse`, `lab`) does around its work: Ctrl-C and a closed pipe.

* **Ctrl-C always interrupts.** Python turns SIGINT into KeyboardInterrupt only if SIGINT was
  not ignored when the interpreter started, and a command started in the background by a
  script, or by some test and CI runners, inherits an ignored SIGINT: Ctrl-C (or `kill -INT`)
  then did nothing and a load test ran to its end. `interruptible()` installs Python's
  handler for the command's duration, so every long command stops with exit 130 however it
  was started. SIGTERM may be made to do the same (a load test must clean up on both).
* **A closed stdout is not an error.** `lab schema | head` closes the pipe early; printing
  then raises BrokenPipeError, and Python's final flush would print another traceback.
  `run_printing` ends the command quietly with 141 (128 + SIGPIPE, what a process killed by
  SIGPIPE reports) and points stdout at /dev/null so nothing is printed at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from taskfuse.core import bounds

#: Exit status after the reader of stdout went away (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 128 + 13
#: Exit status after Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


@contextlib.contextmanager
def interruptible(sigterm: bool = False) -> Iterator[None]:
    """SIGINT (and with `sigterm`, SIGTERM) raise KeyboardInterrupt while inside; the
    previous handlers come back after. Outside the main thread signals cannot be handled
    and nothing changes (a test calling a command's main() from a thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = [signal.SIGINT, *([signal.SIGTERM] if sigterm else [])]
    previous: dict[int, Any] = {s: signal.signal(s, signal.default_int_handler) for s in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_printing(command: Callable[[], int]) -> int:
    """Run a command that prints; a reader that went away ends it with EXIT_BROKEN_PIPE."""
    try:
        code = command()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _silence_stdout() -> None:
    """Send what is left in stdout's buffer, and anything later, to /dev/null."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def number_arg(cast: type[int] | type[float], low: float, high: float,
               open_low: bool = False, unit: str = "") -> Callable[[str], Any]:
    """An argparse `type` for a number in [low, high] (or (low, high] with `open_low`):
    finite, and for `int` a whole number of sane length (a 5,000-digit one is refused by
    its length, not by Python's conversion limit)."""
    what = "a whole number" if cast is int else "a number"

    def parse(text: str) -> Any:
        text = text.strip()
        try:
            if len(text) > 40:
                raise ValueError(text)
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {_short(text)}") from None
        if (cast is float and not math.isfinite(value)) or value > high or value < low \
                or (open_low and value == low):
            bound = f"above {_plain(low)}" if open_low else f"from {_plain(low)}"
            raise argparse.ArgumentTypeError(f"expected {what}{unit} {bound} to "
                                             f"{_plain(high)}, got {_short(text)}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def text_arg(text: str) -> str:
    """An argparse `type` for a name or key: text that can be stored and printed."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            f"not valid UTF-8: {_short(text.encode('utf-8', 'surrogateescape'))}") from None
    return text


def _plain(number: float) -> str:
    return str(number) if isinstance(number, int) else f"{number:.15g}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


#: The number types of the command lines (the bounds and why: taskfuse.core.bounds).
duration_arg = number_arg(float, bounds.MIN_DURATION_S, bounds.MAX_DURATION_S,
                          unit=" of seconds")
period_arg = number_arg(float, bounds.MIN_PERIOD_S, bounds.MAX_DURATION_S, unit=" of seconds")
