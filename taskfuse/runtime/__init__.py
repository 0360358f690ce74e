"""The real-time driver of the core: worker threads, watchdog, cooperative cancel, shutdown.

    from taskfuse.runtime import App, Runner, TaskError

    app = App()

    @app.task("sync_sku", timeout=30)
    def sync_sku(ctx, payload):
        ...

    with Runner(app, open_store("sqlite:///tasks.db"), workers=10) as runner:
        runner.submit("sync_sku", {"sku": "A1"})
        runner.join()

An App takes its limits from a limits file (`App.from_limits(load_limits(path))`, or
`app.configure(...)`), the same file the lab sizes; task code keeps only the call:
`ctx.downstream("partner").call(fn, ...)` and `with ctx.pool("batch"): ...`.
"""

from taskfuse.runtime.app import DEFAULT_LEASE_S, App, TaskDef
from taskfuse.runtime.calls import CallFailed, error_kind
from taskfuse.runtime.context import TaskContext
from taskfuse.runtime.errors import (
    DownstreamRejected,
    RuntimeConfigError,
    TaskCanceled,
    TaskError,
    UnknownDownstream,
    UnknownKind,
    outcome_of,
)
from taskfuse.runtime.pools import POOL_TIMEOUT, PoolSection
from taskfuse.runtime.threads import Runner, RunnerStats

__all__ = [
    "DEFAULT_LEASE_S",
    "POOL_TIMEOUT",
    "App",
    "CallFailed",
    "DownstreamRejected",
    "PoolSection",
    "Runner",
    "RunnerStats",
    "RuntimeConfigError",
    "TaskCanceled",
    "TaskContext",
    "TaskDef",
    "TaskError",
    "UnknownDownstream",
    "UnknownKind",
    "error_kind",
    "outcome_of",
]
