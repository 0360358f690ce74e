"""Strict YAML configuration files: text in, a validated pydantic model out — or one line.

Both kinds of file a person writes by hand go through here: a lab scenario (the world and
its limits) and a limits file (the deployable half, read by `lab` and by `taskfuse worker`).
So both get the same promises:

* models are strict (`extra="forbid"`): an unknown key is an error, never silently dropped;
* an error is one line naming the file, the line, the key path and what was expected:
  ``limits.yaml:12: downstreams.partner.client.bulkhead: input should be ..., got 0``;
* `--set a.b=v` edits the raw document before validation, so overrides get the same checks.

The line of every key path is recorded from the composed YAML document; pydantic's error
locations are cleaned of union tags (dist names, step tags) before they are looked up.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
KeyPath = tuple[Any, ...]
Lines = dict[KeyPath, int]


class ConfigError(Exception):
    """A configuration file that cannot be used; the message is the one line a user sees."""


# -- reading -------------------------------------------------------------------------------


def read_text(path: str | Path, what: str = "configuration") -> str:
    """A file's text; a missing or unreadable file is a ConfigError (one line)."""
    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such {what} file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a {what} file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror}") from None


def parse_document(text: str, source: str, what: str = "configuration"
                   ) -> tuple[dict[str, Any], Lines]:
    """The YAML mapping of a file and the line of every key path in it."""
    try:
        node = yaml.compose(text)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{line}: not valid YAML: {problem}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping of {what} keys at the top level")
    lines: Lines = {}
    if node is not None:
        _lines(node, (), lines)
    return doc, lines


def _lines(node: yaml.Node, path: KeyPath, out: Lines) -> None:
    """Record the 1-based line of every key path in a composed YAML document."""
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, key.value)
            out[sub] = key.start_mark.line + 1
            if not isinstance(value, yaml.ScalarNode):
                _lines(value, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out)


def line_of(loc: KeyPath, lines: Lines) -> int | None:
    """The line of the deepest recorded prefix of a key path (the file's first line if none)."""
    path = tuple(str(p) if not isinstance(p, int) else p for p in loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get(())


def located(source: str, lines: Lines, loc: KeyPath, what: str) -> str:
    """One error line: ``file:line: key.path: what``."""
    line = line_of(loc, lines)
    return f"{source}{f':{line}' if line else ''}: {dotted(loc)}: {what}"


# -- validating ----------------------------------------------------------------------------


def validate(model: type[M], doc: dict[str, Any], source: str, lines: Lines,
             schema_hint: str) -> M:
    """`model` from `doc`; the first validation error becomes a ConfigError (one line)."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source, lines, schema_hint)) from None


_UNION_TAGS = frozenset({"constant", "uniform", "exponential", "lognormal", "empirical",
                         "integers", "constrained-int", "constrained-float", "int", "float",
                         "str", "bool", "function-before", "function-after", "nullable"})


def clean_loc(loc: KeyPath) -> KeyPath:
    """Drop pydantic's union-tag parts: dist names, step tags (work.work), validator names."""
    out: list[Any] = []
    for part in loc:
        if isinstance(part, str) and (
            part in _UNION_TAGS or part[:1].isupper() or "[" in part
            or (out and out[-1] == part)
        ):
            continue
        out.append(part)
    return tuple(out)


def dotted(loc: KeyPath) -> str:
    """A key path as a person writes it: ``batches[0].program[1].call.downstream``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _expected(err: dict[str, Any], schema_hint: str) -> str:
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        return f"unknown key ({schema_hint})"
    if err["type"] == "missing":
        return "required key is missing"
    got = err.get("input")
    if err["type"].startswith(("greater", "less", "int_", "float_", "bool_", "string_",
                               "literal", "dict_", "list_", "too_")):
        return f"{msg[0].lower()}{msg[1:]}, got {got!r}"
    return msg.removeprefix("Value error, ")


def format_validation_error(exc: ValidationError, source: str, lines: Lines,
                            schema_hint: str) -> str:
    """The first error as one line: file:line: key.path: what was expected, got what."""
    err = exc.errors()[0]
    loc = clean_loc(tuple(err["loc"]))
    # a union (e.g. an integer or "unbounded") reports one error per branch: count keys
    more = len({clean_loc(tuple(e["loc"])) for e in exc.errors()}) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return located(source, lines, loc, _expected(err, schema_hint) + tail)


# -- overrides -----------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b.0.c=value' -> (['a', 'b', '0', 'c'], parsed YAML scalar/flow value)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key.path=value")
    key, _, raw = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {text!r}: the key path is empty")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({exc})") from None
    return parts, value


def apply_override(doc: dict[str, Any], parts: list[str], value: Any, text: str) -> None:
    """Set a value at a key path; list items by index or by their `id`."""
    node: Any = doc
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            idx = _list_index(node, part)
            if idx is None:
                raise ConfigError(f"--set {text!r}: {where}: no list item {part!r} "
                                  f"(use an index 0..{len(node) - 1} or an item's id)")
            if last:
                node[idx] = value
            else:
                node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise ConfigError(f"--set {text!r}: {where}: cannot set a key inside {node!r}")


def apply_overrides(doc: dict[str, Any], overrides: list[str] | None) -> None:
    """Apply every `--set key.path=value` to the raw document, in order."""
    for text in overrides or []:
        parts, value = parse_override(text)
        apply_override(doc, parts, value, text)


def _list_index(items: list[Any], part: str) -> int | None:
    if part.isdigit():
        return int(part) if int(part) < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("id") == part:
            return i
    return None


def load_model(model: type[M], text: str, source: str, *, what: str, schema_hint: str,
               overrides: list[str] | None = None,
               prepare: Callable[[dict[str, Any], Lines], None] | None = None) -> M:
    """Parse, override and validate one file's text into `model`.

    `prepare` may edit the raw document first (a scenario pulls in its limits file there).
    """
    doc, lines = parse_document(text, source, what)
    if prepare is not None:
        prepare(doc, lines)
    apply_overrides(doc, overrides)
    return validate(model, doc, source, lines, schema_hint)
