"""Emulated downstreams: one small HTTP server per provider on 127.0.0.1, each in a child
process of its own.

Each server enforces what the scenario says about the other side of a downstream, in the
order the simulator's provider model applies it:

1. outage windows — answer the outage's error after its latency, or hang until the window
   ends (`mode: hang`);
2. the provider's own token bucket (the core's TokenBucket) — 429 after `reject_latency_s`;
3. an error drawn from `errors` (the response is sent after the normal service);
4. service: with `capacity`, c servers with a FIFO queue (the core's Bulkhead, which hands a
   free server straight to the oldest waiter), else a latency drawn per request; slowdown
   windows multiply either. A client that gives up is not noticed: the work is done anyway.

Why child processes, one per provider: the servers are the *other* side of the network; in
the load test's own process they would compete with the workers for one interpreter lock and
skew both sides' latencies, and two busy providers in one process would skew each other (the
retry storm has two). Why not a web framework: the HTTP here is one GET on a keep-alive
connection, answered with a status and two headers; an asyncio protocol that does just that
costs a fraction of a framework's request handling, which at hundreds of requests per second
is the difference between emulating a provider and measuring the emulation. The parent talks
to each child over its stdin/stdout, one JSON line each way: the configuration in, the port
out, then `start` (the run's time zero), `stats`, and end of input, which stops the child —
so a parent that dies for any reason takes its servers with it.

Errors are answered with their HTTP status (`http_503` -> 503, other kinds -> 500) and the
kind in the `X-Error-Kind` header, so the client classifies exactly what was drawn. Every
answer carries `X-Served-S`, the real seconds the provider spent on it (outage, bucket,
queue and service), so the client can tell its own and the network's share of a call's
latency (the harness's overhead, `lab.loadtest.harness`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from lab.scenario import Outage
from lab.scenario import Provider as ProviderSpec
from taskfuse.core.bulkhead import Bulkhead
from taskfuse.core.ratelimit import TokenBucket

HOST = "127.0.0.1"
ERROR_HEADER = "X-Error-Kind"
SERVED_HEADER = "X-Served-S"
_REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}
#: A request with this query parameter only opens a connection (before the run starts); the
#: provider answers at once and counts nothing.
WARM_QUERY = "warm"
#: How long the parent waits for the child to bind its ports, and to stop.
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


class ServerError(Exception):
    """The emulated downstreams could not be started or asked (one line for the user)."""


# -- inside the child: the emulation -------------------------------------------------------


class ProviderEmulation:
    """One provider's behaviour and counters; `answer` decides one request."""

    def __init__(self, name: str, spec: ProviderSpec, seed: int) -> None:
        self.name = name
        self.spec = spec
        self.t0 = time.monotonic()
        self.bucket = (TokenBucket(spec.rate, spec.burst or max(1.0, spec.rate / 10))
                       if spec.rate is not None else None)
        rng = random.Random(f"{seed}:latency:{name}")
        self.latency = spec.latency.sampler(rng)
        self.service = spec.capacity.service.sampler(rng) if spec.capacity else None
        self.servers: Bulkhead[asyncio.Future[None]] | None = (
            Bulkhead(spec.capacity.servers, name) if spec.capacity else None
        )
        self.error_random = random.Random(f"{seed}:errors:{name}").random
        self.stats: dict[str, Any] = {"requests": 0, "served": 0, "rejected_429": 0,
                                      "outage_answers": 0, "errors": {}, "max_queue": 0,
                                      "abandoned": 0}

    def start(self, t0_monotonic: float) -> None:
        """Set the run's time zero (outage and slowdown windows are relative to it)."""
        self.t0 = t0_monotonic
        if self.bucket is not None:  # full at the start, as in the simulation
            self.bucket = TokenBucket(self.bucket.rate, self.bucket.burst, start=0.0)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def outage(self, now: float) -> Outage | None:
        return next((o for o in self.spec.outages if o.start_s <= now < o.end_s), None)

    def factor(self, now: float) -> float:
        f = 1.0
        for s in self.spec.slowdowns:
            if s.start_s <= now < s.end_s:
                f *= s.factor
        return f

    def draw_error(self) -> str | None:
        u = self.error_random()
        total = 0.0
        for kind, p in self.spec.errors.items():
            total += p
            if u < total:
                return kind
        return None

    async def answer(self, query: str, gone: Callable[[], bool]) -> tuple[int, str | None]:
        """One request: (status, error kind or None). `gone` tells whether the client left."""
        if WARM_QUERY in query:  # a connection opened before time zero: not a call
            return 200, None
        self.stats["requests"] += 1
        now = self.now()
        outage = self.outage(now)
        if outage is not None:
            self.stats["outage_answers"] += 1
            wait = outage.latency_s if outage.mode == "error" else outage.end_s - now
            await asyncio.sleep(wait)
            return self.error(outage.error)
        if self.bucket is not None and not self.bucket.try_acquire(now):
            self.stats["rejected_429"] += 1
            await asyncio.sleep(self.spec.reject_latency_s)
            return self.error("http_429")
        error = self.draw_error() if self.spec.errors else None
        await self.serve(now)
        self.stats["served"] += 1
        if gone():
            self.stats["abandoned"] += 1  # the client gave up; the work was done anyway
        return self.error(error) if error is not None else (200, None)

    async def serve(self, now: float) -> None:
        """The service itself; shielded, so a client that leaves does not stop the work."""
        if self.servers is None:
            await asyncio.sleep(self.latency() * self.factor(now))
            return
        job: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.servers.try_acquire(job):
            self._start(job)
        self.stats["max_queue"] = max(self.stats["max_queue"], self.servers.waiting)
        await asyncio.shield(job)

    def _start(self, job: asyncio.Future[None]) -> None:
        assert self.service is not None
        service = self.service() * self.factor(self.now())
        asyncio.get_running_loop().call_later(service, self._finish, job)

    def _finish(self, job: asyncio.Future[None]) -> None:
        if not job.done():
            job.set_result(None)
        assert self.servers is not None
        nxt = self.servers.release()
        if nxt is not None:
            self._start(nxt)

    def error(self, kind: str) -> tuple[int, str]:
        errors = self.stats["errors"]
        if kind != "http_429":
            errors[kind] = errors.get(kind, 0) + 1
        status = int(kind[5:]) if kind.startswith("http_") and kind[5:].isdigit() else 500
        return status, kind


class HttpServer(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: a request head in, one answer out, in order."""

    def __init__(self, emulation: ProviderEmulation) -> None:
        self.emulation = emulation
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.closed = False
        self.pending: set[asyncio.Future[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:  # a GET has no body: its head is the request
            head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            target = head.split(b"\r\n", 1)[0].split(b" ")
            query = target[1].partition(b"?")[2].decode() if len(target) > 1 else ""
            task = asyncio.ensure_future(self.respond(query, time.monotonic()))
            self.pending.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self.pending.discard)

    async def respond(self, query: str, began: float) -> None:
        status, kind = await self.emulation.answer(query, self.gone)
        if self.gone():
            return
        body = (kind or "ok").encode()
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Length: {len(body)}\r\nContent-Type: text/plain\r\n"
                f"{SERVED_HEADER}: {time.monotonic() - began:.6f}\r\n"
                + (f"{ERROR_HEADER}: {kind}\r\n" if kind else "") + "\r\n")
        assert self.transport is not None
        self.transport.write(head.encode() + body)

    def gone(self) -> bool:
        return self.closed or self.transport is None or self.transport.is_closing()


async def _serve(providers: dict[str, ProviderEmulation]) -> tuple[list[asyncio.Server],
                                                                     dict[str, int]]:
    """Bind one server per provider on a free port of 127.0.0.1."""
    loop = asyncio.get_running_loop()
    servers, ports = [], {}
    for name, emulation in providers.items():
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        server = await loop.create_server(lambda e=emulation: HttpServer(e), sock=sock,
                                          backlog=4096)
        servers.append(server)
        ports[name] = sock.getsockname()[1]
    return servers, ports


def _commands(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None]) -> None:
    """Read command lines from stdin (a thread); None when the parent closes it."""
    for line in sys.stdin:
        loop.call_soon_threadsafe(queue.put_nowait, line.strip())
    loop.call_soon_threadsafe(queue.put_nowait, None)


async def child_main(config: Mapping[str, Any]) -> None:
    """The child's life: bind, report ports, obey commands until stdin closes."""
    seed = int(config.get("seed", 0))
    providers = {name: ProviderEmulation(name, ProviderSpec.model_validate(spec), seed)
                 for name, spec in config["providers"].items()}
    servers, ports = await _serve(providers)
    _reply({"ports": ports, "pid": os.getpid()})
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=_commands, args=(loop, queue), daemon=True).start()
    try:
        while (line := await queue.get()) is not None:
            _obey(line, providers)
    finally:
        for server in servers:
            server.close()


def _obey(line: str, providers: dict[str, ProviderEmulation]) -> None:
    command, _, arg = line.partition(" ")
    if command == "start":
        t0 = time.monotonic() - (time.time() - float(arg))
        for p in providers.values():
            p.start(t0)
        _reply({"started": True})
    elif command == "stats":
        _reply({"stats": {name: p.stats for name, p in providers.items()}})


def _reply(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> int:
    """Entry of the child process: one JSON configuration line on stdin, then commands."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    _raise_open_files_limit()
    line = sys.stdin.readline()
    if not line:
        return 0
    asyncio.run(child_main(json.loads(line)))
    return 0


def _raise_open_files_limit() -> None:
    """Thousands of concurrent connections need thousands of descriptors."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY
                                                        else max(soft, 65536), hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - best effort
        pass


# -- in the parent: the handle -------------------------------------------------------------


class _Child:
    """One child process serving one provider; asked one JSON line at a time."""

    def __init__(self, name: str, spec: ProviderSpec, seed: int) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab.loadtest.servers"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        self.config = {"seed": seed,
                       "providers": {name: spec.model_dump(mode="json", by_alias=True)}}
        self.port = 0
        self.pid = self.proc.pid

    def bind(self) -> None:
        """Send the configuration; wait for the bound port."""
        answer = self.ask(json.dumps(self.config), START_TIMEOUT_S)
        self.port = int(answer["ports"][self.name])
        self.pid = int(answer["pid"])

    def ask(self, line: str, timeout: float) -> dict[str, Any]:
        proc = self.proc
        if proc.stdin is None or proc.stdout is None or proc.poll() is not None:
            raise ServerError(f"the emulated downstream {self.name!r} is not running "
                              f"(exit code {proc.poll()})")
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ServerError(f"the emulated downstream {self.name!r} exited "
                              f"(code {proc.poll()})") from None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        reply = proc.stdout.readline() if ready else ""
        if not reply:
            raise ServerError(f"the emulated downstream {self.name!r} did not answer "
                              f"{line.split()[0]!r} within {timeout:g} s (exit code "
                              f"{proc.poll()})")
        return dict(json.loads(reply))

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()

    def reap(self) -> None:
        """Wait for the child (its input is closed), then terminate and kill if it lingers."""
        proc = self.proc
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
        finally:
            if proc.poll() is None:  # interrupted while waiting: never leave it behind
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


class ProviderServers:
    """The child processes serving the providers (one each); a context manager that always
    stops them."""

    def __init__(self, providers: Mapping[str, ProviderSpec], seed: int) -> None:
        self.providers = dict(providers)
        self.seed = seed
        self.children: dict[str, _Child] = {}
        self.ports: dict[str, int] = {}
        self.pids: dict[str, int] = {}

    @property
    def pid(self) -> int | None:
        """The first child's process id (each provider has its own: `pids`)."""
        return next(iter(self.pids.values()), None)

    def __enter__(self) -> ProviderServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, name: str) -> str:
        return f"http://{HOST}:{self.ports[name]}/{name}"

    def start(self) -> ProviderServers:
        """Start every child (they boot in parallel) and wait until each listens."""
        if not self.providers:  # nothing to emulate: no child either
            return self
        _raise_open_files_limit()
        try:
            for name, spec in self.providers.items():
                self.children[name] = _Child(name, spec, self.seed)
            for name, child in self.children.items():
                child.bind()
                self.ports[name], self.pids[name] = child.port, child.pid
        except BaseException:
            self.stop()
            raise
        return self

    def begin(self, t0_wall: float) -> None:
        """Tell the servers the run's time zero (wall clock): windows count from it."""
        for child in self.children.values():
            child.ask(f"start {t0_wall!r}", START_TIMEOUT_S)

    def stats(self) -> dict[str, Any]:
        """What each server counted (requests, served, 429s, errors by kind, ...)."""
        out: dict[str, Any] = {}
        for child in self.children.values():
            out.update(child.ask("stats", START_TIMEOUT_S)["stats"])
        return out

    def stop(self) -> None:
        """Close every child's input (they stop together), then reap each."""
        children, self.children = list(self.children.values()), {}
        for child in children:
            child.close_input()
        for child in children:
            child.reap()


if __name__ == "__main__":  # pragma: no cover - the child process
    sys.exit(main())
