"""The application of the traced-worker fit test: `--app tests.runtime.fit_app:app`.

Its task code keeps only the call; every limit comes from the limits file the worker is
started with. The partner stands in for an API: a seeded latency of a few milliseconds,
and one answer in ten an error the client retries.
"""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any

from taskfuse.runtime import App, TaskContext

app = App("fit-test")
_rng = random.Random(17)
_lock = threading.Lock()


class PartnerError(Exception):
    """As an HTTP client raises it: the response's status names the error kind."""

    response = SimpleNamespace(status_code=503)


def partner(sku: Any, timeout: float | None = None) -> dict[str, Any]:
    with _lock:
        latency, fails = _rng.lognormvariate(-5.3, 0.4), _rng.random() < 0.1
    time.sleep(latency)
    if fails:
        raise PartnerError(f"partner refused {sku!r}")
    return {"sku": sku}


@app.task("sync_sku", downstreams=("partner",))
def sync_sku(ctx: TaskContext, payload: Any) -> dict[str, Any]:
    with ctx.pool("batch"):
        return ctx.downstream("partner").call(partner, payload)
