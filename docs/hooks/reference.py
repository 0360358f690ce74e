"""Reference pages made from the code at build time, so they cannot drift from it.

A page asks for a piece with a marker comment on a line of its own:

    <!-- generated: cli taskfuse -->      every `taskfuse` command's --help
    <!-- generated: cli lab -->           every `lab` command's --help
    <!-- generated: schema scenario -->   every scenario key, from the JSON Schema
    <!-- generated: schema limits -->     every limits-file key, from the JSON Schema
    <!-- generated: states -->            the transition table as a diagram

MkDocs calls `on_page_markdown` (a hook named in mkdocs.yml); the tests call `expand`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- generated: (\w+) ?(\w*) -->$", re.MULTILINE)


def expand(markdown: str) -> str:
    """The page with every marker replaced by what it names."""
    return MARKER.sub(lambda m: _piece(m.group(1), m.group(2)), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)


def _piece(kind: str, arg: str) -> str:
    if kind == "cli":
        return cli_help(arg)
    if kind == "schema":
        return schema_table(arg)
    if kind == "states":
        return states_diagram()
    raise ValueError(f"unknown generated piece {kind!r} (expected cli, schema or states)")


# -- commands ---------------------------------------------------------------------------------


def cli_help(prog: str) -> str:
    """Every subcommand's help of `taskfuse` or `lab`, as argparse prints it at 100 columns."""
    if prog == "taskfuse":
        from taskfuse.cli import build_parser
    elif prog == "lab":
        from lab.cli import build_parser
    else:
        raise ValueError(f"unknown command {prog!r} (expected taskfuse or lab)")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page has a fixed width
    parser = build_parser()
    out = [f"## `{prog}`\n", _fenced(parser.format_help())]
    for name, sub in _subcommands(parser):
        out += [f"### `{prog} {name}`\n", _fenced(sub.format_help())]
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases share one parser
                    seen.add(id(sub))
                    yield name, sub


def _fenced(text: str) -> str:
    return f"```text\n{text.rstrip()}\n```\n"


# -- the scenario and limits formats ------------------------------------------------------------


def schema_table(which: str) -> str:
    """One row per key path of the format: its type, bounds, default and meaning."""
    from lab.scenario import json_schema

    if which not in ("scenario", "limits"):
        raise ValueError(f"unknown schema {which!r} (expected scenario or limits)")
    schema = json.loads(json_schema(limits=which == "limits"))
    meanings = documented_meanings()
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for path, node in _walk(schema, schema, ""):
        meaning = _meaning(meanings, _normal(path)) or node.get("description", "") \
            or _parent_note(meanings, path)
        rows.append(f"| `{path}` | {_type(schema, node)} | {_default(node)} | "
                    f"{_one_line(meaning)} |")
    return "\n".join(rows) + "\n"


def documented_meanings() -> dict[str, str]:
    """Each key's meaning as scenarios/README.md's tables state it (the format's prose home;
    a test there holds every key documented), by normalized key path."""
    readme = Path(__file__).resolve().parents[2] / "scenarios" / "README.md"
    rows = re.findall(r"^\| `([\w.\[\]]+)` \| (.+) \|$", readme.read_text(), re.MULTILINE)
    # its in-page links point into the format's page, included in the site as scenarios.md
    return {_normal(key): text.replace("](#", "](../scenarios.md#") for key, text in rows}


def _meaning(meanings: dict[str, str], path: str) -> str:
    """The documented meaning of a key, or of the same key at another place (a retry policy's
    `max_retry` is documented once, under the top-level `retry`)."""
    if path in meanings:
        return meanings[path]
    parts = path.split(".")
    for start in range(1, len(parts) - 1):
        suffix = ".".join(parts[start:])
        found = [text for key, text in meanings.items() if key.endswith("." + suffix)
                 or key == suffix]
        if found:
            return found[0]
    return ""


def _parent_note(meanings: dict[str, str], path: str) -> str:
    """A key documented inside its parent's row (a breaker's fields, an outage's window)."""
    parent = path.rsplit(".", 1)[0].removesuffix("[]")
    while parent and "." in parent and not _meaning(meanings, _normal(parent)):
        parent = parent.rsplit(".", 1)[0].removesuffix("[]")
    return f"See `{parent}`." if parent != path else ""


def _normal(path: str) -> str:
    """`kinds.KIND.x`, `kinds.NAME.x` and `batches[].x` name the same key."""
    parts = path.replace("[]", "").split(".")
    return ".".join("*" if p.isupper() else p for p in parts)


def _walk(root: dict[str, Any], node: dict[str, Any], prefix: str
          ) -> Iterator[tuple[str, dict[str, Any]]]:
    node = _resolve(root, node)
    for key, sub in sorted(node.get("properties", {}).items()):
        path = f"{prefix}.{key}" if prefix else key
        merged = {**_resolve(root, sub), **{k: v for k, v in sub.items() if k != "$ref"}}
        yield path, merged
        for child, label in _children(root, merged):
            yield from _walk(root, child, f"{path}{label}")


def _children(root: dict[str, Any], node: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """The objects a key holds: itself, a map's values (`.NAME`), a list's items (`[]`).

    A choice between several kinds of object (a distribution, a budget) is not unfolded:
    each kind is documented where it is defined, and its fields would repeat at every use."""
    alts = [_resolve(root, a) for a in node.get("anyOf", []) + node.get("oneOf", [])]
    if sum(1 for a in alts if a.get("properties")) > 1:
        return
    for alt in [*alts, node]:
        alt = _resolve(root, alt)
        if alt.get("properties"):
            yield alt, ""
        extra = alt.get("additionalProperties")
        if isinstance(extra, dict) and _resolve(root, extra).get("properties"):
            yield _resolve(root, extra), ".NAME"
        items = alt.get("items")
        if isinstance(items, dict) and _resolve(root, items).get("properties"):
            yield _resolve(root, items), "[]"


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    resolved: Any = root
    for part in ref.lstrip("#/").split("/"):
        resolved = resolved[part]
    return dict(resolved)


def _type(root: dict[str, Any], node: dict[str, Any]) -> str:
    alts = node.get("anyOf") or node.get("oneOf") or [node]
    kinds = []
    for alt in alts:
        alt = _resolve(root, alt)
        if "const" in alt:
            kinds.append(f"`{json.dumps(alt['const'])}`")
        elif "enum" in alt:
            kinds.append(" / ".join(f"`{json.dumps(v)}`" for v in alt["enum"]))
        elif alt.get("title") and alt.get("properties"):
            kinds.append(str(alt["title"]))
        else:
            kinds.append(str(alt.get("type", "any")) + _bounds(alt))
    return " or ".join(dict.fromkeys(kinds))


def _bounds(node: dict[str, Any]) -> str:
    marks = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<",
             "minItems": "items >=", "maxItems": "items <="}
    parts = [f"{sign} {node[k]}" for k, sign in marks.items() if k in node]
    return f" ({', '.join(parts)})" if parts else ""


def _default(node: dict[str, Any]) -> str:
    if "default" not in node or (isinstance(node["default"], dict | list) and node["default"]):
        return ""  # an object's defaults are its keys' rows
    return f"`{json.dumps(node['default'])}`".replace("|", "\\|")


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- the lifecycle ---------------------------------------------------------------------------------


def states_diagram() -> str:
    """The transition table as a Mermaid state diagram, drawn from the table itself."""
    from taskfuse.core.states import mermaid_diagram

    return f"```mermaid\n{mermaid_diagram().rstrip()}\n```\n"
