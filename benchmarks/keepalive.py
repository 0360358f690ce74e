"""The benchmarks' HTTP client: one GET over a pooled keep-alive connection, as every HTTP
client people use does (httpx, aiohttp), without their own cost per request (httpx scans its
pool at every request). `KeepAlive` for coroutines (asyncio streams, one pool per loop),
`SyncKeepAlive` for threads (sockets); both call the asyncio server of
`tests.runtime.aioserver` and answer the status code.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections import deque
from typing import ClassVar


def request(call_s: float) -> bytes:
    """The request of one call that the server answers after `call_s`."""
    return f"GET /sleep/{call_s} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


class KeepAlive:
    """One worker's keep-alive connections to the server (its event loop's), made fresh for
    each round and closed on that loop after it, untimed."""

    port = 0
    request = b""
    current: ClassVar[KeepAlive]

    def __init__(self) -> None:
        self.idle: deque[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.opened = 0
        self.calls = 0
        self.last = 0.0

    @classmethod
    def fresh(cls) -> KeepAlive:
        cls.current = cls()
        return cls.current

    @classmethod
    async def call(cls) -> int:
        """The task every queue runs: one GET over a pooled connection; its status code."""
        pool = cls.current
        if pool.idle:
            reader, writer = pool.idle.pop()
        else:
            pool.loop = asyncio.get_running_loop()
            reader, writer = await asyncio.open_connection("127.0.0.1", cls.port)
            pool.opened += 1
        writer.write(cls.request)
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        pool.idle.append((reader, writer))
        pool.calls += 1
        pool.last = time.perf_counter()
        return int(head[9:12])

    async def warm(self, n: int) -> None:
        """Open n connections (in steps of 500, as a pool filling would) and keep them idle."""
        self.loop = asyncio.get_running_loop()
        for at in range(0, n, 500):
            pairs = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", self.port)
                                           for _ in range(min(500, n - at))))
            self.idle.extend(pairs)
            self.opened += len(pairs)

    def warm_on(self, loop: asyncio.AbstractEventLoop, n: int) -> None:
        """`warm` on another thread's running loop (taskfuse's)."""
        asyncio.run_coroutine_threadsafe(self.warm(n), loop).result(300)

    async def aclose(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()
        await asyncio.sleep(0)

    def close_from_outside(self) -> None:
        """Close the connections on their loop while it still runs (taskfuse's loop thread)."""
        if self.loop is not None and self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self.aclose(), self.loop).result(60)


class SyncKeepAlive:
    """The same call from threads: a shared deque of idle sockets (its pops and appends are
    atomic), one opened when none is idle."""

    port = 0
    request = b""
    idle: ClassVar[deque[socket.socket]] = deque()

    @classmethod
    def fresh(cls) -> None:
        cls.close()

    @classmethod
    def call(cls) -> int:
        try:
            sock = cls.idle.pop()
        except IndexError:
            sock = socket.create_connection(("127.0.0.1", cls.port))
        sock.sendall(cls.request)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 6:
            data += sock.recv(4096)
        cls.idle.append(sock)
        return int(data[9:12])

    @classmethod
    def warm(cls, n: int) -> None:
        """Open n sockets and keep them idle (untimed, before a round)."""
        cls.idle.extend(socket.create_connection(("127.0.0.1", cls.port)) for _ in range(n))

    @classmethod
    def close(cls) -> None:
        while cls.idle:
            cls.idle.pop().close()


async def bare_calls(n: int, in_flight: int) -> None:
    """No queue at all: n calls on the running loop, `in_flight` at once under a semaphore,
    each task made when a slot frees (the floor of the call path: this client and server on
    this machine, which a queue's rate is read against)."""
    room = asyncio.Semaphore(in_flight)
    tasks: set[asyncio.Task[None]] = set()

    async def one() -> None:
        try:
            await KeepAlive.call()
        finally:
            room.release()

    for _ in range(n):
        await room.acquire()
        task = asyncio.create_task(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
