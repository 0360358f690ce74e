"""The limits a recorded run used, read back from its trace header.

Two writers put them there, in two shapes:

* `lab loadtest` (``lab.loadtest.record.limits_meta``): today's inline scenario keys, with
  batches keyed by id, each downstream's `safety_factor` and each batch's `kind` beside its
  limits, and the scenario's `horizon_s` and `sample_interval_s`;
* `taskfuse worker --trace` (``taskfuse.runtime.tracing``): the App's limits as a limits file
  holds them (``Limits.model_dump``), batches as a list, plus ``meta.limits_file``, the file
  the worker was started with, when there was one.

`recorded_limits` reads either into one shape: a limits document (the keys and paths of a
limits file) and the few scenario keys that ride along. A record that does not validate
as limits is not used (the fit says so and carries the defaults), so a damaged header never
becomes a traceback.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from taskfuse.limits.schema import Limits

#: Scenario keys (not limits) a load test records beside the limits.
_SCENARIO_KEYS = ("horizon_s", "sample_interval_s")


@dataclass
class RecordedLimits:
    """The run's limits as a limits document, and what rides along with them."""

    #: A limits file's document; pools may lack their size (the fit's estimate fills it).
    doc: dict[str, Any]
    #: Scenario keys: horizon_s, sample_interval_s.
    scenario: dict[str, Any]
    #: Per downstream, the safety factor (a world key) a load test records.
    safety: dict[str, float] = field(default_factory=dict)
    #: Per batch id, its task kind (a world key) a load test records.
    kinds: dict[str, str] = field(default_factory=dict)
    #: Whether the header held limits that validate.
    recorded: bool = False
    #: The limits file the run was started with, when the header names one.
    file: str | None = None
    notes: list[str] = field(default_factory=list)

    def batch(self, batch_id: str) -> dict[str, Any]:
        return next((b for b in self.doc.get("batches") or [] if b.get("id") == batch_id), {})


def recorded_limits(meta: dict[str, Any], end_t: float) -> RecordedLimits:
    """The limits in a trace header's `meta` (see the module doc), or the defaults."""
    raw = meta.get("limits")
    named = meta.get("limits_file")
    file = named if isinstance(named, str) and named else None
    horizon = {"horizon_s": max(3600.0, 3 * end_t)}
    if raw is None:
        return _defaults(meta, horizon, file, [])
    try:
        rec = _read(copy.deepcopy(raw))
        Limits.model_validate(_sized(rec.doc))
    except (AttributeError, TypeError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return _defaults(meta, horizon, file, [f"the limits recorded in the trace do not "
                                               f"validate ({first}): not used"])
    rec.scenario = horizon | rec.scenario
    rec.recorded, rec.file = True, file
    return rec


def _defaults(meta: dict[str, Any], horizon: dict[str, Any], file: str | None,
              notes: list[str]) -> RecordedLimits:
    doc: dict[str, Any] = {}
    workers = meta.get("workers")
    if isinstance(workers, int) and not isinstance(workers, bool) and workers >= 1:
        doc["workers"] = workers
    return RecordedLimits(doc=doc, scenario=horizon, file=file, notes=notes)


def _read(raw: dict[str, Any]) -> RecordedLimits:
    if not isinstance(raw, dict):
        raise TypeError(f"a mapping, got {type(raw).__name__}")
    scenario = {k: raw.pop(k) for k in _SCENARIO_KEYS if k in raw}
    safety: dict[str, float] = {}
    for name, ds in (raw.get("downstreams") or {}).items():
        if isinstance(ds, dict) and "safety_factor" in ds:
            safety[name] = ds.pop("safety_factor")
    batches = raw.get("batches") or []
    if isinstance(batches, dict):  # a load test's record: keyed by id
        batches = [{"id": bid, **(b or {})} for bid, b in batches.items()]
    kinds: dict[str, str] = {}
    listed = []
    for b in batches:
        entry = {k: v for k, v in dict(b).items() if v is not None}
        kind = entry.pop("kind", None)
        if kind is not None:
            kinds[str(entry.get("id"))] = kind
        listed.append(entry)
    raw["batches"] = listed
    return RecordedLimits(doc=raw, scenario=scenario, safety=safety, kinds=kinds)


def _sized(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with a placeholder size for pools the record leaves unsized (a load test
    records only their acquire timeout), for validating the rest."""
    pools = {n: {"size": 1, **(p or {})} for n, p in (doc.get("pools") or {}).items()}
    return {**doc, "pools": pools}
