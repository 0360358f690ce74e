"""The real-time driver of the core: worker threads, watchdog, cooperative cancel, shutdown.

    from taskfuse.runtime import App, Runner, TaskError

    app = App()

    @app.task("sync_sku", timeout=30)
    def sync_sku(ctx, payload):
        ...

    with Runner(app, open_store("sqlite:///tasks.db"), workers=10) as runner:
        runner.submit("sync_sku", {"sku": "A1"})
        runner.join()
"""

from taskfuse.runtime.app import DEFAULT_LEASE_S, App, DownstreamConfig, TaskDef
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
from taskfuse.runtime.threads import Runner, RunnerStats

__all__ = [
    "DEFAULT_LEASE_S",
    "App",
    "DownstreamConfig",
    "DownstreamRejected",
    "Runner",
    "RunnerStats",
    "RuntimeConfigError",
    "TaskCanceled",
    "TaskContext",
    "TaskDef",
    "TaskError",
    "UnknownDownstream",
    "UnknownKind",
    "outcome_of",
]
