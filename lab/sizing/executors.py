"""Where sweep runs execute: in this process, in local processes, or on a Dask cluster.

A sweep is many independent simulations (a scenario text, overrides and a seed in, a report
dict out), so all an executor has to do is `map` a top-level function over picklable jobs and
hand results back as they finish, with their index. Completion order never matters: the
sweep files each result under its (point, seed) key, so the output is the same whichever
executor ran it and in whatever order.

- `SerialExecutor`: one job after another in this process. `--jobs 1`; no start-up cost,
  and the right choice for a handful of runs.
- `ProcessExecutor`: a `ProcessPoolExecutor` with the *spawn* start method, so it behaves the
  same on Linux, macOS and Windows and never inherits a half-initialised parent. Workers
  ignore SIGINT: Ctrl-C reaches the parent only, which keeps finished runs and cancels the
  queued ones. The pool lives as long as the executor, so `lab size` pays start-up once.
- `DaskExecutor`: Dask distributed, when one machine is not enough. Give it a scheduler
  address, or it starts a LocalCluster of `jobs` single-threaded worker processes. Jobs carry
  the scenario text itself, so workers need the package but not the scenario files.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Protocol, TypeVar

from lab.scenario import ScenarioError

J = TypeVar("J")
R = TypeVar("R")


class Executor(Protocol):
    """Runs `fn` over jobs; yields (index, result) as results arrive."""

    name: str

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """In this process, in order: deterministic, no start-up cost."""

    name = "serial"

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        for i, job in enumerate(jobs):
            yield i, fn(job)

    def close(self) -> None:
        return None


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it keeps what finished)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ProcessExecutor:
    """Local processes (spawn start method), created on first use and reused until close."""

    name = "process"

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_ignore_sigint,
            )
        return self._pool

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        if not jobs:
            return
        pool = self._ensure()
        futures: dict[Future[R], int] = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        try:
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            for fut in futures:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class DaskExecutor:
    """Dask distributed: a running scheduler at `address`, or a LocalCluster of `jobs`."""

    name = "dask"

    def __init__(self, jobs: int, address: str | None = None) -> None:
        try:
            import logging

            from distributed import Client, LocalCluster
        except ImportError:
            raise ScenarioError("--executor dask needs Dask distributed: "
                                "pip install 'taskfuse[dask]'") from None
        self._cluster: Any = None
        if address is None:
            self._cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                                         dashboard_address=None, silence_logs=logging.ERROR)
            address = self._cluster.scheduler_address
        try:
            self.client: Any = Client(address, timeout="10s")
        except OSError as exc:
            self._close_cluster()
            raise ScenarioError(f"--scheduler {address!r}: cannot connect: {exc}") from None

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        from distributed import as_completed as dask_completed

        if not jobs:
            return
        futures = self.client.map(fn, list(jobs), pure=False)
        index = {fut.key: i for i, fut in enumerate(futures)}
        try:
            for fut in dask_completed(futures):
                yield index[fut.key], fut.result()
        finally:
            self.client.cancel(futures)

    def _close_cluster(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def close(self) -> None:
        self.client.close()
        self._close_cluster()


def make_executor(kind: str, jobs: int, address: str | None = None) -> Executor:
    """`--executor` and `--jobs` as an Executor (local with one job runs in-process)."""
    if jobs < 1:
        raise ScenarioError(f"--jobs {jobs!r}: expected at least 1")
    if kind == "dask":
        return DaskExecutor(jobs, address)
    if address is not None:
        raise ScenarioError("--scheduler is for --executor dask")
    return SerialExecutor() if jobs == 1 else ProcessExecutor(jobs)
