"""The one place a fitted scenario is written: world and limits in, files out.

Two shapes, from the same values:

* `split_texts`: the world as a scenario file that names a limits file (`limits: REF`,
  relative to the scenario), and that limits file: the limits the run used, every value
  written out, so `taskfuse worker --limits` runs the same file the lab simulates;
* `scenario_text`: one scenario with the limits inline (today's shipped scenarios' shape).

The split is made with the limits format's own functions (`limits_of`, `strip_limits`), so
the two shapes cannot disagree, and every text is validated with the scenario reader before
it is returned: a fitted scenario always loads with `lab simulate`. What the limits name but
the fitted world cannot hold (a downstream the run never called has no provider to simulate,
a batch it never submitted is not in the world) is left out of both, and `left_out` says so.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from lab.fit.recorded_limits import RecordedLimits
from lab.scenario import parse_scenario
from taskfuse.limits.files import dump_limits, limits_of, strip_limits
from taskfuse.limits.schema import LIMITS_KEYS, DownstreamLimits, Limits

#: A batch's limits, in the order a scenario writes them (`kind` is the world's).
_BATCH_LIMITS = ("cap", "priority", "timeout_s", "max_retry")
_SECTIONS = ("pools", "downstreams", "batches", "alerts")


def scenario_doc(world: dict[str, Any], rec: RecordedLimits, *, name: str, seed: int,
                 description: str) -> dict[str, Any]:
    """`world` under the limits of `rec`, as one scenario document (limits inline)."""
    doc: dict[str, Any] = {"name": name, "description": description, "seed": seed}
    doc |= rec.scenario
    limits = rec.doc
    for key in LIMITS_KEYS[""]:
        if key in limits and key not in _SECTIONS:
            doc[key] = limits[key]
    pool_limits = limits.get("pools") or {}
    doc["pools"] = {n: {**p, **(pool_limits.get(n) or {})} for n, p in world["pools"].items()}
    ds_limits = limits.get("downstreams") or {}
    doc["downstreams"] = {
        n: {**d, **({"safety_factor": rec.safety[n]} if n in rec.safety else {}),
            **(ds_limits.get(n) or {})}
        for n, d in world["downstreams"].items()}
    if world.get("business"):
        doc["business"] = world["business"]
    doc["batches"] = [_batch(b, rec) for b in world["batches"]]
    if "alerts" in limits:
        doc["alerts"] = limits["alerts"]
    if world.get("slo"):
        doc["slo"] = world["slo"]
    return doc


def scenario_text(world: dict[str, Any], rec: RecordedLimits, *, name: str, seed: int,
                  description: str, comments: list[str]) -> str:
    """A scenario file (YAML) of `world` run under `rec`'s limits inline, headed by
    `comments`."""
    doc = scenario_doc(world, rec, name=name, seed=seed, description=description)
    text = _comments(comments) + _yaml(doc)
    parse_scenario(text, f"<fitted {name}>")  # a bug here, not a user's mistake
    return text


def split_texts(world: dict[str, Any], rec: RecordedLimits, *, name: str, seed: int,
                description: str, limits_ref: str, comments: list[str],
                limits_comments: list[str]) -> tuple[str, str]:
    """The world as a scenario naming `limits_ref`, and that limits file's text."""
    doc = scenario_doc(world, rec, name=name, seed=seed, description=description)
    limits_doc = limits_of(copy.deepcopy(doc))
    limits_doc["batches"] = [b for b in limits_doc["batches"] if len(b) > 1]
    for pool, entry in (rec.doc.get("pools") or {}).items():  # a deployment's own pools
        if pool not in limits_doc["pools"] and "size" in (entry or {}):
            limits_doc["pools"][pool] = entry
    limits = Limits.model_validate(limits_doc)
    strip_limits(doc)
    head = {k: doc.pop(k) for k in ("name", "description", "seed")}
    world_doc = {**head, "limits": limits_ref, **doc}
    text = _comments(comments) + _yaml(world_doc)
    limits_text = dump_limits(limits, "\n".join(limits_comments))
    with tempfile.TemporaryDirectory() as tmp:  # the scenario as `lab simulate` will read it
        path = Path(tmp) / "limits.yaml"
        path.write_text(limits_text)
        parse_scenario(text, f"<fitted {name}>", limits=path)  # a bug, not a user's mistake
    return text, limits_text


def left_out(world: dict[str, Any], rec: RecordedLimits) -> list[str]:
    """The recorded limits the fitted world cannot hold, each as `path: value` (see the
    module doc)."""
    out = []
    for ds, entry in sorted((rec.doc.get("downstreams") or {}).items()):
        if ds not in world["downstreams"]:
            short = DownstreamLimits.model_validate(entry).model_dump(
                mode="json", exclude_defaults=True)
            out.append(f"downstreams.{ds}: {_flow(short)}  (never called in the run: no "
                       "provider to simulate)")
    batches = {b["id"] for b in world["batches"]}
    out += [f"batches.{entry.get('id')}: {_flow(entry)}  (never submitted in the run)"
            for entry in rec.doc.get("batches") or []
            if entry.get("id") not in batches and len(entry) > 1]
    for pool, entry in sorted((rec.doc.get("pools") or {}).items()):
        if pool not in world["pools"] and "size" not in (entry or {}):
            out.append(f"pools.{pool}: {_flow(entry)}  (never used in the run: its size "
                       "is unknown)")
    return out


def _batch(batch: dict[str, Any], rec: RecordedLimits) -> dict[str, Any]:
    limits = rec.batch(batch["id"])
    out = {"id": batch["id"], "count": batch["count"]}
    if batch["id"] in rec.kinds:
        out["kind"] = rec.kinds[batch["id"]]
    out |= {k: limits[k] for k in _BATCH_LIMITS if limits.get(k) is not None}
    return out | {"arrival": batch["arrival"], "program": batch["program"]}


def _comments(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1_000_000).strip()


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
