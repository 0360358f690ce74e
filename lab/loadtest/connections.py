"""A lean HTTP/1.1 keep-alive client for the load test's calls: the standard library's
`http.client` connections, kept in a LIFO stack shared by the worker threads
(`Connections`), and asyncio stream connections for the coroutines of `async` kinds, kept
the same way on the runtime's event loop (`AsyncConnections`).

Why not httpx (which the load test used first): on two cores with dozens of worker threads,
every microsecond a call spends in Python is a microsecond another thread's call waits for
the interpreter lock, and that wait lands in the measured latency. A GET through
`http.client` costs about a third less than through httpx's pool (measured side by side:
2.4 ms vs 3.7 ms median overhead with 20 threads on a 20 ms server), and the load test
needs nothing httpx adds (redirects, cookies, HTTP/2, proxies).

A call answers (status, error kind header, the server's own time) or raises `CallTimeout`
/ `CallBroken`; a connection that timed out or broke is closed, not reused (its late answer
must not be read as the next call's). Both clients read the answer with one function
(`answer_of`); only the IO differs.

Why asyncio streams and not aiohttp or httpx's async client: neither is a dependency of
the project (httpx is a dev extra), and the emulated providers speak the smallest HTTP/1.1
there is (a GET, a status line, three or four headers, a Content-Length body), so a
request is one write and an answer two reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

#: (status, the X-Error-Kind header or None, the X-Served-S header in real seconds or None)
Answer = tuple[int, str | None, float | None]


class CallTimeout(Exception):
    """No answer within the call's timeout."""


class CallBroken(Exception):
    """The connection failed (refused, reset, closed mid-answer)."""


class Connections:
    """Keep-alive connections to one server; `get` is safe from any thread."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self._free: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._all: set[http.client.HTTPConnection] = set()

    def get(self, headers: dict[str, str], timeout: float | None,
            query: str = "") -> Answer:
        """One GET of the server's path: (status, the error kind header or None, the real
        seconds the server says it spent, if it says)."""
        conn = self._take()
        try:
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            conn.timeout = timeout
            conn.request("GET", self.path + (f"?{query}" if query else ""), headers=headers)
            response = conn.getresponse()
            response.read()
            answer = answer_of(response.status, response.getheader)
        except TimeoutError:
            self._drop(conn)
            raise CallTimeout from None
        except (OSError, http.client.HTTPException):
            self._drop(conn)
            raise CallBroken from None
        self._give(conn)
        return answer

    def warm(self, connections: int, query: str) -> None:
        """Open `connections` connections now (concurrent requests with `query`)."""
        with ThreadPoolExecutor(max_workers=max(1, connections)) as pool:
            list(pool.map(lambda _: self.get({}, 10.0, query), range(connections)))

    def close(self) -> None:
        with self._lock:
            conns, self._all, self._free = list(self._all), set(), []
        for conn in conns:
            conn.close()

    def _take(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._free:
                return self._free.pop()
        conn = http.client.HTTPConnection(self.host, self.port)
        with self._lock:
            self._all.add(conn)
        return conn

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if conn in self._all:
                self._free.append(conn)

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._all.discard(conn)

    def __enter__(self) -> Connections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def answer_of(status: int, header: Callable[[str], str | None]) -> Answer:
    """What a call reads of an answer, from its status and a header lookup (either client)."""
    served = header("X-Served-S")
    return status, header("X-Error-Kind"), float(served) if served else None


def request_head(host: str, port: int, target: str, headers: dict[str, str]) -> bytes:
    """A keep-alive GET as `http.client` sends it (the async client's one write)."""
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Accept-Encoding: identity",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
#: Connections `AsyncConnections.warm` opens at once.
WARM_WAVE = 100


class AsyncConnections:
    """Keep-alive stream connections to one server, for coroutines on one event loop.

    Used only from that loop (the runtime's, which runs every coroutine of `async` kinds),
    so the free stack needs no lock. Opened lazily by the first calls, or before the run
    by `warm` on the same loop.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self._free: list[_Stream] = []
        self._all: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that opened them

    async def get(self, headers: dict[str, str], timeout: float | None,
                  query: str = "") -> Answer:
        """One GET of the server's path, as `Connections.get` (same answer, same errors)."""
        target = self.path + (f"?{query}" if query else "")
        stream: _Stream | None = None
        try:
            async with asyncio.timeout(timeout):
                stream = self._free.pop() if self._free else await self._open()
                reader, writer = stream
                writer.write(request_head(self.host, self.port, target, headers))
                answer, length = _parse_head(await reader.readuntil(b"\r\n\r\n"))
                await reader.readexactly(length)
        except TimeoutError:
            self._drop(stream)
            raise CallTimeout from None
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError):
            self._drop(stream)
            raise CallBroken from None
        except BaseException:  # canceled mid-request: its answer must not be read later
            self._drop(stream)
            raise
        self._free.append(stream)
        return answer

    async def warm(self, connections: int, query: str) -> None:
        """Open `connections` connections now (concurrent requests with `query`), a wave
        of WARM_WAVE at a time: a thousand at once hold the loop for over 100 ms, which the
        runtime's lag watcher would name as a blocking task."""
        opened = len(self._all)
        while opened < connections:
            wave = min(WARM_WAVE, connections - opened)
            await asyncio.gather(*(self.get({}, 10.0, query) for _ in range(wave)))
            opened += wave

    def close(self) -> None:
        """Close every connection (from any thread: the transports close on their loop)."""
        writers, self._all, self._free = list(self._all), set(), []
        loop = self._loop
        if loop is None or loop.is_closed():
            return  # a closed loop closed its transports
        for writer in writers:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(writer.close)

    async def _open(self) -> _Stream:
        self._loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._all.add(writer)
        return reader, writer

    def _drop(self, stream: _Stream | None) -> None:
        if stream is not None:
            stream[1].close()
            self._all.discard(stream[1])


def _parse_head(head: bytes) -> tuple[Answer, int]:
    """The answer and the body's length, from an answer's status line and headers."""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return (answer_of(status, lambda name: fields.get(name.lower())),
            int(fields.get("content-length", "0")))
