"""Reading and writing limits files, and joining one to a scenario's world.

A limits file is validated on its own first (so its errors point into it: file, line, key
path), then, when a scenario refers to it, its keys are laid over the scenario's document at
the same paths. A key given in both places is an error rather than a silent winner; batches
are matched by id, and a batch, pool or downstream the world does not have is reported.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from taskfuse.configfile import (
    ConfigError,
    Lines,
    located,
    parse_document,
    read_text,
    validate,
)
from taskfuse.limits.schema import LIMITS_KEYS, Limits

HINT = "not part of the limits format; see `lab schema --limits`"


def load_limits(path: str | Path) -> Limits:
    """Read and validate a limits file; any problem is a ConfigError (one line)."""
    doc, _ = read_limits_document(path)
    return Limits.model_validate(doc)


def read_limits_document(path: str | Path) -> tuple[dict[str, Any], Lines]:
    """A limits file's raw document, already validated (errors name file:line:key)."""
    source = str(path)
    doc, lines = parse_document(read_text(path, "limits"), source, "limits")
    validate(Limits, doc, source, lines, HINT)
    return doc, lines


def parse_limits(text: str, source: str = "<limits>") -> Limits:
    doc, lines = parse_document(text, source, "limits")
    return validate(Limits, doc, source, lines, HINT)


# -- a scenario's limits -------------------------------------------------------------------


def strip_limits(doc: dict[str, Any]) -> None:
    """Remove every limits key from a scenario document, keeping its world.

    What stays: a pool's outages, a downstream's provider and safety factor, a batch's id,
    count, arrival and program, and every top-level world key.
    """
    for key in LIMITS_KEYS[""]:
        if key not in ("pools", "downstreams", "batches"):
            doc.pop(key, None)
    for section in ("pools", "downstreams"):
        for entry in (doc.get(section) or {}).values():
            if isinstance(entry, dict):
                for key in LIMITS_KEYS[section]:
                    entry.pop(key, None)
    for batch in doc.get("batches") or []:
        if isinstance(batch, dict):
            for key in LIMITS_KEYS["batches"]:
                batch.pop(key, None)


def join_limits(doc: dict[str, Any], lines: Lines, source: str, limits_doc: dict[str, Any],
                limits_source: str) -> set[tuple[str, str]]:
    """Lay a limits document over a scenario document, in place.

    A leaf set in both is refused (which one should win is the user's call, not ours); a
    batch of the limits file that the scenario does not declare is refused too. Answers the
    pools and downstreams only the limits file has (a deployment's file may size pools a
    scenario's world does not model).
    """
    added = {(section, name) for section in ("pools", "downstreams")
             for name in (limits_doc.get(section) or {})
             if name not in (doc.get(section) or {})}
    for key, value in limits_doc.items():
        if key == "batches":
            _join_batches(doc, lines, source, value or [], limits_source)
        else:
            _join(doc, key, copy.deepcopy(value), (key,), lines, source, limits_source)
    return added


def _join(node: dict[str, Any], key: str, value: Any, path: tuple[Any, ...], lines: Lines,
          source: str, limits_source: str) -> None:
    if key not in node or node[key] is None:
        node[key] = value
        return
    mine = node[key]
    if isinstance(mine, dict) and isinstance(value, dict):
        for sub, sub_value in value.items():
            _join(mine, sub, sub_value, (*path, sub), lines, source, limits_source)
        return
    raise ConfigError(located(source, lines, path, f"set both here and in the limits file "
                                                   f"{limits_source}; keep it in one place"))


def _join_batches(doc: dict[str, Any], lines: Lines, source: str, batches: list[Any],
                  limits_source: str) -> None:
    mine = doc.get("batches")
    if not isinstance(mine, list):
        return  # the scenario's own validation reports a missing batch list
    by_id = {b.get("id"): i for i, b in enumerate(mine) if isinstance(b, dict)}
    for entry in batches:
        bid = entry.get("id")
        if bid not in by_id:
            raise ConfigError(f"{limits_source}: batches: batch {bid!r} is not one of the "
                              f"scenario's batches {sorted(str(k) for k in by_id)}")
        i = by_id[bid]
        for key, value in entry.items():
            if key != "id":
                _join(mine[i], key, value, ("batches", i, key), lines, source, limits_source)


def limits_of(scenario_doc: dict[str, Any]) -> dict[str, Any]:
    """The limits half of a (validated) scenario dump: the same keys at the same paths."""
    out: dict[str, Any] = {}
    for key in LIMITS_KEYS[""]:
        if key in ("pools", "downstreams", "batches"):
            continue
        if key in scenario_doc:
            out[key] = scenario_doc[key]
    for section in ("pools", "downstreams"):
        entries = {name: {k: v for k, v in entry.items() if k in LIMITS_KEYS[section]}
                   for name, entry in (scenario_doc.get(section) or {}).items()}
        out[section] = entries
    out["batches"] = [
        {"id": b["id"], **{k: b[k] for k in LIMITS_KEYS["batches"] if k in b}}
        for b in scenario_doc.get("batches") or []
    ]
    return out


# -- writing -------------------------------------------------------------------------------


def dump_limits(limits: Limits, header: str = "") -> str:
    """A limits file's text: every value written out (None left out), headed by comments.

    Defaults are written too, so the deployed file does not change meaning when a default
    changes in a later version.
    """
    doc = limits.model_dump(mode="json", exclude_none=True)
    doc["batches"] = [b for b in doc.get("batches", []) if len(b) > 1 or b.get("cap")]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comment + body


def write_limits(limits: Limits, path: str | Path, header: str = "") -> None:
    """Write a limits file whole or not at all (a temporary file renamed into place)."""
    target = Path(path)
    if not target.parent.is_dir():
        raise ConfigError(f"{target}: the directory {str(target.parent)!r} does not exist")
    text = dump_limits(limits, header)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"{target}: cannot write: {exc.strerror}") from None
