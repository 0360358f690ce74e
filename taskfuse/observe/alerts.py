"""The shipped Prometheus alert rules, evaluated by the project's own AlertEvaluator.

Prometheus evaluates `rules/taskfuse.rules.yml` on a live fleet; this module evaluates the
same alert expressions on *recorded series* — a trace of a real run or of a simulation, or
series a test builds — with `taskfuse.core.metrics.AlertEvaluator`, so a CI machine without
Prometheus still knows when each alert fires and resolves::

    python -m taskfuse.observe.alerts RUN.trace [--rules FILE] [--fail-if-fired]

Each alert expression must have the checkable form

    taskfuse:METRIC OP THRESHOLD [and [on (LABELS)] taskfuse:finished >= N]

where METRIC is one of the core's metrics (running, queue_depth, success_rate, p99_ratio,
stuck_share, loop_lag),
OP is > or <, THRESHOLD a number or the series `taskfuse:running_limit`, and the optional
guard is the core's `min_samples`. `for:` becomes `for_s`. Anything else is refused with
the alert's name, rather than checked approximately.

What this does not check is the PromQL of the recording rules that produce those series
(max over workers, histogram_quantile, ...): that needs promtool (see the rules file's
header). The recorded P99 ratio here is the core's exact one (recent 5 minutes of
durations against the batch's first 100), where Prometheus estimates it from histogram
buckets against the batch's previous day.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

from taskfuse.cliguard import EXIT_INTERRUPTED, interruptible, run_printing
from taskfuse.configfile import ConfigError, load_yaml, read_text
from taskfuse.core.events import Event, EventKind
from taskfuse.core.metrics import METRICS, AlertChange, AlertEvaluator, AlertRule, MetricsAggregator
from taskfuse.core.states import TaskfuseError, TaskStatus

RULES_FILE = "taskfuse.rules.yml"
#: Series an alert may compare with instead of a number, and the Sample field holding it.
THRESHOLD_SERIES = {"taskfuse:running_limit": "running_limit"}
GATE_SERIES = "taskfuse:finished"

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_EXPR = re.compile(
    rf"^(?P<lhs>taskfuse:[a-z_0-9]+)\s*(?P<op>[<>])\s*(?P<rhs>{_NUMBER}|taskfuse:[a-z_0-9]+)"
    rf"(?:\s+and(?:\s+on\s*\([a-z_,\s]*\))?\s+(?P<gate>taskfuse:[a-z_0-9]+)\s*>=\s*"
    rf"(?P<n>\d+))?$"
)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


class RulesError(TaskfuseError):
    """A rules file this module cannot read or an alert it cannot check."""


# -- the rules file ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromAlert:
    """One `alert:` rule of a Prometheus rules file, as written."""

    name: str
    expr: str
    for_s: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckedRule:
    """An alert in the core's terms; `threshold_from` names a series used as the threshold."""

    alert: PromAlert
    rule: AlertRule
    threshold_from: str | None = None


def rules_path() -> Traversable:
    """The rules file shipped in the package (`rule_files:` of a Prometheus config)."""
    return resources.files("taskfuse.observe.rules").joinpath(RULES_FILE)


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration ("5m", "1h30m", "250ms")."""
    text = str(text).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise RulesError(f"not a Prometheus duration: {text!r}")
    return float(sum(int(n) * _UNIT_S[u] for n, u in parts))


def load_alerts(path: str | Path | Traversable | None = None) -> list[PromAlert]:
    """The `alert:` rules of a rules file (default: the shipped one), in file order."""
    source = rules_path() if path is None else path
    try:  # the strict loader's bounds: a hostile rules file is one line, never a traceback
        text = (read_text(source, "rules") if isinstance(source, str | Path)
                else source.read_text("utf-8"))
        doc, _ = load_yaml(text, str(source), "rules")
    except ConfigError as exc:
        raise RulesError(str(exc)) from None
    groups = (doc or {}).get("groups") if isinstance(doc or {}, dict) else None
    if not (isinstance(groups or [], list)
            and all(isinstance(g, dict) and isinstance(g.get("rules") or [], list)
                    and all(isinstance(r, dict) for r in g.get("rules") or [])
                    for g in groups or [])):
        raise RulesError(f"{source}: expected Prometheus rule groups: "
                         "{groups: [{name: ..., rules: [{alert: ..., expr: ...}, ...]}]}")
    rules = [r for g in groups or [] for r in g.get("rules") or [] if "alert" in r]
    return [_alert(r) for r in rules]


def _alert(rule: dict[str, Any]) -> PromAlert:
    if not isinstance(rule.get("labels") or {}, dict):
        raise RulesError(f"alert {rule['alert']!r}: labels must be a mapping")
    expr = " ".join(str(rule.get("expr", "")).split())  # folded YAML keeps newlines: drop them
    return PromAlert(str(rule["alert"]), expr, parse_duration(rule.get("for", "0s")),
                     dict(rule.get("labels") or {}))


def to_core(alert: PromAlert) -> CheckedRule:
    """The AlertRule an alert expression stands for; RulesError if it is not checkable."""
    match = _EXPR.match(alert.expr)
    if match is None:
        raise RulesError(f"alert {alert.name!r}: expression {alert.expr!r} is not of the "
                         "checkable form `taskfuse:METRIC OP THRESHOLD [and taskfuse:finished "
                         ">= N]`")
    metric = match["lhs"].removeprefix("taskfuse:")
    if metric not in METRICS:
        raise RulesError(f"alert {alert.name!r}: {match['lhs']!r} is none of the core's "
                         f"metrics {sorted(METRICS)}")
    rhs, threshold_from = match["rhs"], None
    if rhs.startswith("taskfuse:"):
        if rhs not in THRESHOLD_SERIES:
            raise RulesError(f"alert {alert.name!r}: cannot compare with series {rhs!r}")
        threshold_from, threshold = THRESHOLD_SERIES[rhs], math.nan
    else:
        threshold = float(rhs)
    if match["gate"] is not None and match["gate"] != GATE_SERIES:
        raise RulesError(f"alert {alert.name!r}: the guard must be {GATE_SERIES} >= N")
    min_samples = int(match["n"]) if match["n"] is not None else 0
    rule = AlertRule(alert.name, metric, match["op"], threshold, alert.for_s, min_samples)
    return CheckedRule(alert, rule, threshold_from)


def load_rules(path: str | Path | Traversable | None = None) -> list[CheckedRule]:
    """Every alert of a rules file in the core's terms."""
    return [to_core(a) for a in load_alerts(path)]


# -- recorded series -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    """The fleet's values at one evaluation time, as the recording rules would give them."""

    t: float
    running: int = 0
    running_limit: float | None = None
    queue_depth: int = 0
    success: int = 0
    failed: int = 0
    #: The worst event loop lag of the fleet, in seconds (None: no async kind).
    loop_lag: float | None = None


@dataclass
class Recording:
    """Samples in time order, and the MOVE events that give task durations."""

    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def task(self, task_id: str, batch: str | None, start: float, end: float,
             status: TaskStatus = TaskStatus.SUCCESS) -> None:
        """Record one task that ran from `start` to `end` (the events a runner emits)."""
        self.events.append(Event(start, EventKind.MOVE, task_id, batch, None,
                                 TaskStatus.PENDING.value, TaskStatus.RUNNING.value))
        self.events.append(Event(end, EventKind.MOVE, task_id, batch, None,
                                 TaskStatus.RUNNING.value, status.value))

    @classmethod
    def from_trace(cls, path: str | Path) -> Recording:
        """A trace's timeline (queue_depth, running, running_limit, done.*) and its moves.

        Works for a real run's trace and a simulation's alike; a series the trace lacks
        counts as 0, except the running limit, whose absence keeps its alert quiet. A
        worker's trace on a shared store records the fleet's running count but only its own
        threads as the limit: judge the running alert there on the fleet's Prometheus.
        """
        from taskfuse.trace import read_trace

        trace = read_trace(path)
        names = set(trace.series_names)
        if "queue_depth" not in names:
            return cls([], list(trace.events(kind=EventKind.MOVE)))
        times = trace.series("queue_depth")[0]
        cols = {key: trace.series(name)[1] if name in names else None
                for key, name in _TRACE_SERIES.items()}
        samples = [
            Sample(float(t), int(_at(cols["running"], i)), _at(cols["running_limit"], i, None),
                   int(_at(cols["queue_depth"], i)), int(_at(cols["success"], i)),
                   int(_at(cols["failed"], i)), _at(cols["loop_lag"], i, None))
            for i, t in enumerate(times)
        ]
        return cls(samples, list(trace.events(kind=EventKind.MOVE)))


#: Sample fields and the trace series they come from.
_TRACE_SERIES = {"running": "running", "running_limit": "running_limit",
                 "queue_depth": "queue_depth", "success": "done.SUCCESS",
                 "failed": "done.FAILED", "loop_lag": "loop_lag"}


def _at(values: Any, i: int, missing: Any = 0) -> Any:
    """Value i of a column; `missing` for an absent column, a null or a NaN."""
    if values is None:
        return missing
    value = values[i]
    return missing if value is None or not math.isfinite(value) else float(value)


# -- evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Firing:
    """One firing of an alert: from `fired_at` to `resolved_at` (None: still firing)."""

    alert: str
    fired_at: float
    resolved_at: float | None


def evaluate(
    rules: Sequence[CheckedRule],
    recording: Recording,
    p99_baseline_s: dict[str, float] | None = None,
) -> list[AlertChange]:
    """Run the rules over the recording with AlertEvaluator; every fire and resolve, in order.

    At each sample the durations of tasks that ended by then are fed in as events, the
    counts are set from the sample (as the runtime's trace sampler does with store counts),
    thresholds taken from a series are refreshed, and the evaluator is asked at that time.
    """
    metrics = MetricsAggregator()
    evaluator = AlertEvaluator([c.rule for c in rules], metrics, p99_baseline_s=p99_baseline_s)
    events = sorted(recording.events, key=lambda e: e.t)
    changes: list[AlertChange] = []
    i = 0
    for sample in sorted(recording.samples, key=lambda s: s.t):
        while i < len(events) and events[i].t <= sample.t:
            metrics(events[i])
            i += 1
        _set_counts(metrics, sample)
        evaluator.rules = [_refreshed(c, sample) for c in rules]
        changes += evaluator.evaluate(sample.t)
    return changes


def _set_counts(metrics: MetricsAggregator, sample: Sample) -> None:
    counts = metrics.counts
    counts[TaskStatus.RUNNING.value] = int(sample.running)
    counts[TaskStatus.PENDING.value] = int(sample.queue_depth)
    counts[TaskStatus.SUCCESS.value] = int(sample.success)
    counts[TaskStatus.FAILED.value] = int(sample.failed)
    metrics.loop_lag = sample.loop_lag


def _refreshed(checked: CheckedRule, sample: Sample) -> AlertRule:
    """The rule with its threshold read from the sample when it comes from a series."""
    if checked.threshold_from is None:
        return checked.rule
    value = getattr(sample, checked.threshold_from)
    return replace(checked.rule, threshold=math.nan if value is None else float(value))


def firings(changes: Iterable[AlertChange]) -> list[Firing]:
    """Pair fire and resolve changes into intervals, in the order the alerts fired."""
    open_: dict[str, float] = {}
    out: list[Firing] = []
    for c in changes:
        if c.firing:
            open_[c.rule] = c.at
        elif c.rule in open_:
            out.append(Firing(c.rule, open_.pop(c.rule), c.at))
    out += [Firing(rule, at, None) for rule, at in open_.items()]
    return sorted(out, key=lambda f: (f.fired_at, f.alert))


# -- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Print when each alert of the rules file fires and resolves over a recorded trace."""
    parser = argparse.ArgumentParser(prog="python -m taskfuse.observe.alerts",
                                     description=main.__doc__)
    parser.add_argument("trace", help="a trace file (taskfuse worker --trace, lab simulate)")
    parser.add_argument("--rules", help="a Prometheus rules file (default: the shipped one)")
    parser.add_argument("--fail-if-fired", action="store_true",
                        help="exit 1 when any alert fired (hold a run or scenario to it)")
    args = parser.parse_args(argv)
    try:
        with interruptible():
            return run_printing(lambda: _run(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    from taskfuse.trace import TraceError

    try:
        rules = load_rules(args.rules)
        found = firings(evaluate(rules, Recording.from_trace(args.trace)))
    except (RulesError, TraceError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for f in found:
        end = "still firing" if f.resolved_at is None else f"resolved at t={f.resolved_at:.1f}s"
        print(f"{f.alert}: fired at t={f.fired_at:.1f}s, {end}")
    if not found:
        print(f"no alert fired ({len(rules)} rules)")
    return 1 if found and args.fail_if_fired else 0


if __name__ == "__main__":
    sys.exit(main())
