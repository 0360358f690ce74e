"""Task functions that leave processes behind or raise BaseExceptions in a task process, at
the top level of a module so that a task process finds them; `app` is for
``taskfuse worker --app``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

from taskfuse.runtime import App
from tests.runtime.procexec_app import report

app = App("procgroup-tests", lease_s=5.0)

_EXITS: dict[str, BaseException] = {
    "SystemExit": SystemExit(2),
    "KeyboardInterrupt": KeyboardInterrupt(),
    "GeneratorExit": GeneratorExit(),
}


def fork_and_hang(ctx: Any, payload: Any) -> str:
    """Start a child that would sleep ten minutes, tell the test both pids, then hang deaf
    to the context (a socket read that never returns)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    report(payload["port"], f"{os.getpid()} {child.pid}")
    never, _keep = socket.socketpair()
    never.recv(1)
    return "unreachable"


def raise_exit(ctx: Any, payload: Any) -> None:
    """Raise the BaseException `payload` names (argparse's sys.exit(2), a KeyboardInterrupt)."""
    raise _EXITS[payload]


def pid(ctx: Any, payload: Any) -> int:
    return os.getpid()


app.task("fork_and_hang", timeout=60, executor="process")(fork_and_hang)
app.task("raise_exit", timeout=30, max_retry=3, executor="process")(raise_exit)
app.task("pid", executor="process")(pid)
