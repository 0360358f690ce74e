"""What a load test writes down beyond the runtime's own events, so `lab fit` can learn from it.

The runtime already records every downstream call when it ends (CALL: subject, outcome kind,
latency), bulkhead waits (WAIT "bulkhead") and every move. Only the load test sees the parts
of the world it emulates, so it adds:

* header meta ``limits``: the limits the run used (workers, claim batch, watchdog, task
  timeout and retry, sweeper, alerts, each downstream's client fuses, each batch's cap,
  priority, timeout and retries, each pool's acquire timeout), in scenario seconds and in
  today's scenario keys: a fit writes them back beside the world it estimated;
* header meta ``gateway``: the business gateway's timeout and breaker, configuration of the
  business system that no event shows;
* per DB step and per business request, two events in scenario seconds: WAIT with reason
  ``pool`` when the connection is granted (subject = pool, value = seconds waited), and QUERY
  when its query ends (subject = pool, value = seconds of query, reason ``kept`` when the
  task keeps the connection until it ends, ``returned`` when it gives it back at once).
  Business requests carry no task id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lab.scenario import Scenario
from taskfuse.core.events import Event, EventKind
from taskfuse.core.task import Task

KEPT, RETURNED = "kept", "returned"


def limits_meta(sc: Scenario) -> dict[str, Any]:
    """The limits of `sc` as the run used them (unscaled scenario seconds)."""
    dump = sc.model_dump(mode="json", by_alias=True)
    return {
        "workers": dump["workers"],
        "claim_batch": dump["claim_batch"],
        "stuck_threads_max": dump["stuck_threads_max"],
        "kinds": dump["kinds"],
        "watchdog_interval_s": dump["watchdog_interval_s"],
        "task_timeout_s": dump["task_timeout_s"],
        "retry": dump["retry"],
        "sweeper": dump["sweeper"],
        "alerts": dump["alerts"],
        "horizon_s": dump["horizon_s"],
        "sample_interval_s": dump["sample_interval_s"],
        "downstreams": {name: {"client": ds["client"], "safety_factor": ds["safety_factor"]}
                        for name, ds in dump["downstreams"].items()},
        "batches": {b["id"]: {k: b[k] for k in ("kind", "cap", "priority", "timeout_s",
                                                  "max_retry")}
                    for b in dump["batches"]},
        "pools": {name: {"acquire_timeout_s": p["acquire_timeout_s"]}
                  for name, p in dump["pools"].items()},
    }


def gateway_meta(sc: Scenario) -> dict[str, Any] | None:
    """The business gateway's own configuration (timeout, breaker), or None."""
    if sc.business is None:
        return None
    dump = sc.business.model_dump(mode="json", by_alias=True)
    return {"gateway_timeout_s": dump["gateway_timeout_s"], "breaker": dump["breaker"]}


class DbRecorder:
    """Writes the DB events of the module doc; a no-op until a trace sink is attached."""

    def __init__(self) -> None:
        self.emit: Callable[[Event], None] | None = None

    def granted(self, now: float, pool: str, waited: float, task: Task | None) -> None:
        """A connection was granted at scenario time `now` after `waited` scenario seconds."""
        if self.emit is not None:
            self.emit(Event(now, EventKind.WAIT, *_who(task), None, None, "pool",
                            task.attempt if task else None, None, pool, waited))

    def queried(self, now: float, pool: str, seconds: float, kept: bool,
                task: Task | None) -> None:
        """A query of `seconds` ended at `now`; `kept`: the connection stays with the task."""
        if self.emit is not None:
            self.emit(Event(now, EventKind.QUERY, *_who(task), None, None,
                            KEPT if kept else RETURNED, task.attempt if task else None,
                            None, pool, seconds))


def _who(task: Task | None) -> tuple[str | None, str | None, str | None]:
    if task is None:
        return None, None, None
    return task.task_id, task.batch_id, None
