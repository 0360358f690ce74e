"""Time scaling: the same scenario, F times faster (F < 1) or slower (F > 1).

A load test runs in real time, so a 35-minute scenario would take 35 minutes. Scaling time
by F multiplies every duration, timeout, window and start time by F and divides every rate
by F; counts (tasks, calls, servers, bursts, pool sizes, probes) stay as they are. The
scaled scenario is the same queueing system with a different unit of time: simulating it
gives the original report with every time multiplied by F (a test holds this), so a real
run of it can be converted back by dividing its times by F.

The limit of the trick is the machine: at F = 0.1 a 20 ms query takes 2 ms, and a Python
thread wake-up (tens to hundreds of microseconds) becomes a visible part of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from lab.scenario import Scenario, ScenarioError

Doc = dict[str, Any]

#: An `integers` distribution used for a duration is turned into the same distribution
#: over scaled values (`empirical`), as long as it has at most this many values.
_MAX_INTEGER_VALUES = 10_000


def scale_scenario(scenario: Scenario, factor: float) -> Scenario:
    """The scenario with time multiplied by `factor` (see module doc); 1 returns it as is."""
    if not factor > 0 or factor != factor or factor == float("inf"):
        raise ScenarioError(f"--time-scale must be a finite number > 0, got {factor!r}")
    if factor == 1:
        return scenario
    doc = scenario.model_dump(mode="python", by_alias=True)
    _Scaler(factor).scenario(doc)
    try:
        return Scenario.model_validate(doc)
    except ValidationError as exc:  # a scaled number left its bounds: one line, not a trace
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ScenarioError(f"--time-scale {factor:g}: {where} scaled is out of bounds: "
                            f"{first['msg'].lower()}, got {first['input']!r}") from None


class _Scaler:
    """Walks a dumped scenario and rescales each time-valued key in place."""

    def __init__(self, factor: float) -> None:
        self.f = factor

    def t(self, node: Doc | None, *keys: str) -> None:
        """Durations: times F."""
        for key in keys:
            if node is not None and node.get(key) is not None:
                node[key] = node[key] * self.f

    def r(self, node: Doc | None, *keys: str) -> None:
        """Rates: divided by F."""
        for key in keys:
            if node is not None and node.get(key) is not None:
                node[key] = node[key] / self.f

    def scenario(self, doc: Doc) -> None:
        self.t(doc, "horizon_s", "sample_interval_s", "watchdog_interval_s", "task_timeout_s",
               "process_respawn_s")
        self.retry(doc["retry"])
        for kind in doc["kinds"].values():
            self.t(kind, "timeout_s")
            if kind.get("retry") is not None:
                self.retry(kind["retry"])
        self.t(doc["sweeper"], "interval_s", "lease_s", "heartbeat_s", "max_pending_age_s")
        for pool in doc["pools"].values():
            self.t(pool, "acquire_timeout_s")
            self.windows(pool["outages"])
        for ds in doc["downstreams"].values():
            self.provider(ds["provider"])
            self.client(ds["client"])
        if doc.get("business") is not None:
            self.business(doc["business"])
        for batch in doc["batches"]:
            self.batch(batch)
        for fault in doc["faults"]:
            self.t(fault, "at_s")
        self.t(doc["alerts"], "running_for_s", "queue_for_s", "stuck_for_s",
               "loop_lag_s", "loop_lag_for_s")
        baseline = doc["alerts"]["p99_baseline_s"]
        for key in baseline:
            baseline[key] *= self.f
        self.t(doc["slo"], "business_p99_s", "makespan_s")

    def windows(self, windows: list[Doc]) -> None:
        for w in windows:
            self.t(w, "start_s", "end_s", "latency_s")

    def steps(self, steps: list[Doc]) -> None:
        for step in steps:
            self.t(step, "at_s")
            self.r(step, "rate")

    def retry(self, retry: Doc) -> None:
        self.t(retry["backoff"], "base", "cap")
        if retry.get("budget") is not None:
            self.t(retry["budget"], "window_s")
            self.r(retry["budget"], "min_per_s")

    def breaker(self, breaker: Doc | None) -> None:
        if breaker is None:
            return
        self.t(breaker, "open_wait_s", "slow_call_s")
        if breaker["window"] == "time":
            self.t(breaker, "window_size")

    def provider(self, p: Doc) -> None:
        if p.get("rate") is not None and p.get("burst") is None:
            p["burst"] = max(1.0, p["rate"] / 10)  # pin the default, which follows the rate
        self.r(p, "rate")
        self.t(p, "reject_latency_s")
        p["latency"] = self.dist(p["latency"])
        if p.get("capacity") is not None:
            p["capacity"]["service"] = self.dist(p["capacity"]["service"])
        self.windows(p["outages"])
        self.windows(p["slowdowns"])

    def client(self, c: Doc) -> None:
        self.t(c, "timeout_s")
        if c.get("rate_limit") is not None:
            self.r(c["rate_limit"], "rate")
        self.breaker(c.get("breaker"))
        if c.get("adaptive") is not None:
            self.t(c["adaptive"], "latency_threshold_s")
        self.retry(c["retry"])

    def business(self, b: Doc) -> None:
        self.r(b, "rate")
        self.steps(b["schedule"])
        b["query"] = self.dist(b["query"])
        self.t(b, "gateway_timeout_s")
        self.breaker(b.get("breaker"))

    def batch(self, batch: Doc) -> None:
        arrival = batch["arrival"]
        self.t(arrival, "start_s", "tick_scale")
        self.r(arrival, "rate")
        self.steps(arrival["steps"])
        self.t(batch, "timeout_s")
        self.program(batch["program"])
        for child in batch["children"]:
            self.program(child["program"])

    def program(self, steps: list[Doc]) -> None:
        for step in steps:
            if "work" in step:
                step["work"] = self.dist(step["work"])
            elif "db" in step:
                step["db"]["query"] = self.dist(step["db"]["query"])
            elif "hang" in step:
                step["hang"]["duration"] = self.dist(step["hang"]["duration"])

    def dist(self, d: Doc) -> Doc:
        """A duration distribution scaled by F (the same shape, its values times F)."""
        scale: Callable[[float], float] = lambda x: x * self.f  # noqa: E731
        kind = d["dist"]
        if kind == "constant":
            return {**d, "value": scale(d["value"])}
        if kind == "uniform":
            return {**d, "low": scale(d["low"]), "high": scale(d["high"])}
        if kind in ("exponential", "lognormal"):
            return {**d, "mean": scale(d["mean"])}
        if kind == "empirical":
            if d.get("values") is not None:
                return {**d, "values": [scale(v) for v in d["values"]]}
            return {**d, "percentiles": {q: scale(v) for q, v in d["percentiles"].items()}}
        if d["high"] - d["low"] >= _MAX_INTEGER_VALUES:
            raise ScenarioError(
                f"an integers distribution {d['low']}..{d['high']} used as a duration "
                "cannot be time-scaled; use uniform"
            )
        return {"dist": "empirical", "values": [scale(v) for v in range(d["low"], d["high"] + 1)]}
