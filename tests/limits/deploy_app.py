"""The application of the lab-to-production test: `--app tests.limits.deploy_app:app`.

Its task code keeps only the calls; every limit (workers, the partner's timeout and
retries, the shared pool) comes from the limits file the worker is started with.
"""

from __future__ import annotations

from typing import Any

from taskfuse.runtime import App, TaskContext

app = App("deploy-test")


def partner(sku: Any, timeout: float | None = None) -> dict[str, Any]:
    """Stands in for the partner's API; tells which timeout the client gave it."""
    return {"sku": sku, "timeout": timeout}


@app.task("sync_sku", downstreams=("partner",))
def sync_sku(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    with ctx.pool("shared"):
        return ctx.downstream("partner").call(partner, payload)
