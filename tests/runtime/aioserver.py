"""A small HTTP/1.1 server on 127.0.0.1 for async tasks to call over a real socket.

It runs its own asyncio loop in a thread (or is started in a process by the benchmark) and
answers keep-alive requests by path:

* ``/sleep/S``: 200 after S seconds (a partner call that takes S);
* ``/status/N``: N at once (a partner error);
* ``/hang``: never answers; `hung` counts requests waiting there and `arrived` is set at
  the first one, a readiness signal for tests that act on a task mid-await.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class AioServer:
    """The server (module doc); `port` is known once `start` returned."""

    def __init__(self) -> None:
        self.port = 0
        self.requests = 0
        self.hung = 0
        self.arrived = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="test-aioserver")
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> AioServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=8192)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                self.requests += 1
                status = await self._answer(path)
                writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: 2\r\n\r\nok".encode())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _answer(self, path: str) -> int:
        if path.startswith("/sleep/"):
            await asyncio.sleep(float(path.rsplit("/", 1)[1]))
            return 200
        if path.startswith("/status/"):
            return int(path.rsplit("/", 1)[1])
        if path == "/hang":
            self.hung += 1
            self.arrived.set()
            await asyncio.Event().wait()
        return 404

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextmanager
def aioserver() -> Iterator[AioServer]:
    server = AioServer().start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def aioserver_process() -> Iterator[str]:
    """The server in a process of its own (its CPU is not the caller's); yields its URL."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-m", "tests.runtime.aioserver"], cwd=root,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port:
            raise RuntimeError(f"the server process ended (exit {process.wait(10)})")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(10)


if __name__ == "__main__":
    print(AioServer().start().port, flush=True)
    threading.Event().wait()
