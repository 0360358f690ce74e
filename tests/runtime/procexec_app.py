"""Task functions for the process executor's tests, at the top level of a module so that a
task process finds them by ``module:qualname``; `app` is for ``taskfuse worker --app``.

Functions that take part in a test's choreography talk to the test over a TCP socket on
127.0.0.1 whose port is in the payload: the test learns when a task really runs (and in
which process) by accepting its connection, never by sleeping.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import warnings
from typing import Any

from taskfuse.runtime import App, TaskError

app = App("procexec-tests", lease_s=5.0)


def report(port: int, line: str) -> socket.socket:
    """Connect to the test at `port` and send one line; the socket stays open."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"{line}\n".encode())
    return sock


def hang(ctx: Any, payload: Any) -> str:
    """Ignores its context: says where it runs, then blocks on a read that never returns
    (a socket without a timeout, the issue's example of a real hang)."""
    ctx.logger.info("hanging in pid %d", os.getpid())
    if isinstance(payload, dict) and "port" in payload:
        report(payload["port"], str(os.getpid()))
    never, _keep = socket.socketpair()
    never.recv(1)
    return "unreachable"


def pid(ctx: Any, payload: Any) -> int:
    return os.getpid()


def double(ctx: Any, payload: Any) -> Any:
    return {"twice": payload * 2, "pid": os.getpid()}


def echo(ctx: Any, payload: Any) -> Any:
    return payload


def raise_task_error(ctx: Any, payload: Any) -> None:
    raise TaskError(payload["kind"], payload["message"])


def raise_value_error(ctx: Any, payload: Any) -> None:
    raise ValueError(f"cannot use {payload!r}")


def raise_timeout(ctx: Any, payload: Any) -> None:
    raise TimeoutError("the partner did not answer")


def exit_hard(ctx: Any, payload: Any) -> None:
    """Dies as a crash would: no outcome, no goodbye."""
    os._exit(3)


def log_lines(ctx: Any, payload: Any) -> str:
    ctx.logger.info("hello %s", payload, extra={"sku": payload})
    logging.getLogger("some.library").warning("a library speaks")
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        ctx.logger.exception("with a traceback")
    return "logged"


def python_speaks(ctx: Any, payload: Any) -> str:
    """What Python prints on its own: a warning, and a thread that dies of an exception."""
    warnings.warn(f"old api used by {payload}", RuntimeWarning, stacklevel=1)

    def doomed() -> None:
        raise RuntimeError(f"a helper thread of {payload} failed")

    thread = threading.Thread(target=doomed, name="helper")
    thread.start()
    thread.join()
    return "spoke"


def returns_set(ctx: Any, payload: Any) -> set[int]:
    return {1, 2, 3}


def context_facts(ctx: Any, payload: Any) -> dict[str, Any]:
    """What the context tells a task function, so a test can compare it with the record."""
    return {
        "task_id": ctx.task_id, "trace_id": ctx.trace_id, "kind": ctx.kind,
        "attempt": ctx.attempt, "payload": ctx.payload, "deadline": ctx.deadline,
        "traceparent": ctx.traceparent(), "headers": ctx.http_headers({"X-A": "1"}),
        "cancelled": ctx.cancelled(), "heartbeat": ctx.heartbeat(),
        "slept_through": not ctx.sleep(0.01), "pid": os.getpid(),
    }


def hold_downstream(ctx: Any, payload: Any) -> str:
    """Inside `db`'s fuses: tell the test, wait until it says go, leave."""
    with ctx.downstream("db"), report(payload["port"], f"in {ctx.task_id}") as sock:
        sock.recv(1)
    return "released"


def call_unknown_downstream(ctx: Any, payload: Any) -> None:
    with ctx.downstream("nowhere"):
        pass


def scripted_call(ctx: Any, payload: Any) -> list[float | None]:
    """`ctx.downstream("partner").call(...)` whose first attempts fail with the error kinds
    in payload["fail"], one each, then answer with the timeouts each attempt was given: the
    client's policy (in the worker) decides every retry; the attempts run here."""
    failures = list(payload["fail"])
    given: list[float | None] = []

    def partner(timeout: float | None = None) -> list[float | None]:
        given.append(timeout)
        if failures:
            raise TaskError(failures.pop(0), "scripted")
        return given

    result: list[float | None] = ctx.downstream("partner").call(partner)
    return result


async def scripted_call_async(ctx: Any, payload: Any) -> list[float | None]:
    """`scripted_call` as a coroutine on the event loop: the same plan, awaited attempts."""
    failures = list(payload["fail"])
    given: list[float | None] = []

    async def partner(timeout: float | None = None) -> list[float | None]:
        given.append(timeout)
        if failures:
            raise TaskError(failures.pop(0), "scripted")
        return given

    result: list[float | None] = await ctx.downstream("partner").call(partner)
    return result


def failing_call(ctx: Any, payload: Any) -> str:
    """A downstream call that fails inside the fuses; the task catches it and goes on."""
    try:
        with ctx.downstream("db"):
            raise ConnectionResetError("reset by peer")
    except ConnectionResetError:
        return "survived"


app.task("hang", timeout=1, max_retry=0, executor="process")(hang)
app.task("double", executor="process")(double)
app.task("double_thread")(double)
app.task("hang_long", timeout=60, executor="process")(hang)
