"""The one place a fitted scenario is written: world and limits in, a scenario file out.

Today a scenario holds both the world (providers, pools, business, batches, SLOs) and the
limits (workers, retries, client fuses, sweeper, alerts) inline, so `scenario_text` merges
the two into today's keys. When limits move to a file of their own, only this module
changes: the callers already hand the two halves over separately.

The text is validated with the scenario reader before it is returned, so a fitted scenario
always loads with `lab simulate`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from lab.scenario import parse_scenario

#: Limits keyed by batch id in the recorded limits, merged into each batch's entry.
_BATCH_LIMITS = ("kind", "cap", "priority", "timeout_s", "max_retry")


def scenario_text(world: dict[str, Any], limits: dict[str, Any], *, name: str, seed: int,
                  description: str, comments: list[str]) -> str:
    """A scenario file (YAML) of `world` run under `limits`, headed by `comments`."""
    doc: dict[str, Any] = {"name": name, "description": description, "seed": seed}
    for key in ("horizon_s", "sample_interval_s", "workers", "claim_batch",
                "watchdog_interval_s", "task_timeout_s", "retry", "sweeper"):
        if key in limits:
            doc[key] = limits[key]
    pool_limits = limits.get("pools") or {}
    doc["pools"] = {n: {**p, **(pool_limits.get(n) or {})} for n, p in world["pools"].items()}
    ds_limits = limits.get("downstreams") or {}
    doc["downstreams"] = {n: {**d, **(ds_limits.get(n) or {})}
                          for n, d in world["downstreams"].items()}
    if world.get("business"):
        doc["business"] = world["business"]
    batch_limits = limits.get("batches") or {}
    doc["batches"] = [_batch(b, batch_limits.get(b["id"]) or {}) for b in world["batches"]]
    if "alerts" in limits:
        doc["alerts"] = limits["alerts"]
    if world.get("slo"):
        doc["slo"] = world["slo"]
    text = "".join(f"# {line}\n" if line else "#\n" for line in comments)
    text += yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    parse_scenario(text, f"<fitted {name}>")  # a bug here, not a user's mistake
    return text


def _batch(batch: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    out = {"id": batch["id"], "count": batch["count"]}
    out |= {k: limits[k] for k in _BATCH_LIMITS if limits.get(k) is not None}
    return out | {"arrival": batch["arrival"], "program": batch["program"]}


def write_text(path: Path, text: str) -> None:
    """Write all or nothing: a temporary file beside `path`, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
