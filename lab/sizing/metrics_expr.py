"""Metric paths and SLO expressions over a run report (the keys of `lab simulate --json`).

A metric path is the report's own key path: `makespan_s`, `business.p99_s`,
`downstreams.partner.rejected_429`, `pools.shared.wait_p99_s`. A `*` step sums over every
child (`downstreams.*.rejected_429` = all 429s), so a constraint can cover downstreams the
user did not name. Booleans read as 1/0 (so the mean of `slo.ok` over seeds is the share of
seeds that kept the file's SLO) and a missing measurement (`null`, e.g. no business request
yet) reads as NaN, which never satisfies a constraint.

An SLO expression is `PATH OP NUMBER[UNIT]` with OP one of <=, <, >=, >, == and an optional
unit ms or s (`business.p99_s<=60ms`). Paths are checked against a report of the scenario
before anything runs, so a typo costs a second, not a sweep.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lab.scenario import ScenarioError

#: Short names a person types for the report keys they mean.
ALIASES = {"throughput": "throughput_per_s", "makespan": "makespan_s"}

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
    "==": operator.eq,
}
_EXPR = re.compile(r"^\s*([A-Za-z0-9_.*\-]+)\s*(<=|>=|==|<|>)\s*([-+0-9.eE]+)\s*(ms|s)?\s*$")


def canonical(path: str) -> str:
    """The report key path a user's metric name stands for (aliases resolved)."""
    path = path.strip()
    return ALIASES.get(path, path)


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(value)


def _walk(node: Any, parts: list[str]) -> Any:
    """The value at `parts`, or a KeyError naming the first step that is not there."""
    for i, part in enumerate(parts):
        if part == "*" and isinstance(node, Mapping):
            rest = parts[i + 1:]
            return sum(_number(_walk(child, rest)) for child in node.values())
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            raise KeyError(".".join(parts[: i + 1]))
    return node


def metric_value(report: Mapping[str, Any], path: str) -> float:
    """The number at a metric path (NaN for a missing measurement)."""
    return _number(_walk(report, canonical(path).split(".")))


def check_metric(report: Mapping[str, Any], path: str, flag: str = "--metric") -> str:
    """Raise one line when `path` names nothing numeric in `report`; returns it canonical."""
    name = canonical(path)
    try:
        value = _walk(report, name.split("."))
    except KeyError as exc:
        missing = str(exc.args[0])
        parent = missing.rpartition(".")[0]
        known = _walk(report, parent.split(".")) if parent else report
        has = f" ({parent or 'the report'} has: {', '.join(sorted(known))})" if isinstance(
            known, Mapping) else ""
        raise ScenarioError(f"{flag} {path!r}: no key {missing!r} in the report{has}") from None
    try:
        _number(value)
    except TypeError:
        raise ScenarioError(f"{flag} {path!r}: {name!r} is not a number in the report "
                            f"(it holds {type(value).__name__}); name a key inside it") from None
    return name


@dataclass(frozen=True, slots=True)
class Constraint:
    """One SLO: `path op limit`, e.g. business.p99_s <= 0.06."""

    path: str
    op: str
    limit: float
    text: str

    def value(self, report: Mapping[str, Any]) -> float:
        return metric_value(report, self.path)

    def holds(self, report: Mapping[str, Any]) -> bool:
        """True when the run keeps this promise (a missing measurement never does)."""
        v = self.value(report)
        return not math.isnan(v) and _OPS[self.op](v, self.limit)

    def margin(self, value: float) -> float:
        """Headroom as a fraction of the limit: 0.2 = 20 % to spare, negative = broken."""
        if math.isnan(value):
            return -math.inf
        scale = abs(self.limit) or 1.0
        if self.op in ("<=", "<"):
            return (self.limit - value) / scale
        if self.op in (">=", ">"):
            return (value - self.limit) / scale
        return -abs(value - self.limit) / scale

    def __str__(self) -> str:
        return f"{self.path}{self.op}{self.limit:g}"


def parse_constraint(text: str) -> Constraint:
    """'business.p99_s<=60ms' -> Constraint; a malformed expression is one ScenarioError."""
    match = _EXPR.match(text)
    if match is None:
        raise ScenarioError(f"--slo {text!r}: expected PATH OP NUMBER, e.g. "
                            "'business.p99_s<=0.06' (OP one of <=, <, >=, >, ==)")
    path, op, raw, unit = match.groups()
    try:
        limit = float(raw)
    except ValueError:
        raise ScenarioError(f"--slo {text!r}: {raw!r} is not a number") from None
    if not math.isfinite(limit):  # 1e999 reads as inf: a bound nothing can break
        raise ScenarioError(f"--slo {text!r}: {raw!r} is not a finite number")
    if unit == "ms":
        limit /= 1000.0
    return Constraint(canonical(path), op, limit, text.strip())
