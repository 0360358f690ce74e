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

Hostile files get the same one line, and cost bounded time and memory whatever they hold:

* the file must be UTF-8 text of at most `MAX_BYTES`, without NUL or other control
  characters (the line and column of the first one are named);
* the document is composed into YAML nodes first and checked before any Python value is
  built: at most `MAX_NODES` nodes *counting every alias as a copy of what it names* (a
  "billion laughs" alias bomb is refused before it expands), no alias inside its own anchor,
  at most `MAX_DEPTH` levels of nesting, integers of at most `MAX_INT_DIGITS` digits;
* a key written twice in one mapping is an error naming both lines (YAML would silently keep
  the last one). Keys merged in with ``<<: *anchor`` may be overridden, as YAML intends.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
KeyPath = tuple[Any, ...]
Lines = dict[KeyPath, int]

#: A configuration file larger than this is refused unread (the shipped scenarios are < 3 KB).
MAX_BYTES = 256 * 1024
#: Nodes of a document with every alias counted as a full copy of what it names.
MAX_NODES = 100_000
#: Levels of nesting (a scenario needs about eight).
MAX_DEPTH = 64
#: Digits of one integer (Python would spend quadratic time converting longer ones).
MAX_INT_DIGITS = 64
#: A value quoted in an error message is cut to this many characters.
MAX_QUOTE = 80

_MERGE_TAG = "tag:yaml.org,2002:merge"
# What YAML 1.1 allows in a stream (its "printable" set); tab, LF and CR are the only controls.
_NOT_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


class ConfigError(Exception):
    """A configuration file that cannot be used; the message is the one line a user sees.

    The message is kept to one line whatever it quotes (a newline becomes a space).
    """

    def __init__(self, message: object = "") -> None:
        super().__init__(" ".join(str(message).splitlines()))


def quote(value: Any) -> str:
    """`repr(value)`, cut to MAX_QUOTE characters: an error line quotes, it does not dump."""
    text = repr(value)
    return text if len(text) <= MAX_QUOTE else f"{text[:MAX_QUOTE - 5]}...{text[-2:]}"


# -- reading -------------------------------------------------------------------------------


def read_text(path: str | Path, what: str = "configuration") -> str:
    """A file's text; a missing, unreadable, oversized or non-UTF-8 file is a ConfigError.

    Only a regular file is read: opened without blocking and checked first, so a FIFO (or a
    device) given by mistake is refused at once instead of waiting forever for a writer."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode):
                raise ConfigError(f"{p}: not a regular file (a pipe or a device): expected a "
                                  f"{what} file")
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such {what} file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, expected a {what} file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{p}: larger than {MAX_BYTES // 1024} KiB: expected a {what} file "
                          "written by hand")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                          f"offset {exc.start}): expected a {what} file saved as UTF-8") from None


def _check_text(text: str, source: str, what: str) -> None:
    """Size and characters, before the YAML parser sees the text."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_BYTES // 1024} KiB: expected a {what} "
                          "file written by hand")
    bad = _NOT_PRINTABLE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        char = bad.group()
        name = "a NUL byte" if char == "\x00" else f"the control character {char!r}"
        raise ConfigError(f"{source}:{line}: {name} at column {column}: expected "
                          f"{what} text (YAML allows no such character)")


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml's when installed), with integers bounded in length.

    It is used in two steps (`compose_checked`): compose the node graph, check it, and only
    then construct Python values, so nothing unbounded is ever built.
    """

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        if sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of more than {MAX_INT_DIGITS} digits", node.start_mark)
        return super().construct_yaml_int(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def load_yaml(text: str, source: str, what: str = "configuration") -> tuple[Any, yaml.Node | None]:
    """The value of one YAML document and its node graph, checked (see the module doc)."""
    _check_text(text, source, what)
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_graph(node, source)
        return loader.construct_document(node), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed"
        if exc.problem and exc.context:
            problem = f"{exc.problem} ({exc.context})"
        raise ConfigError(f"{source}{line}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:  # a reader error: a character libyaml refuses
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    except (ValueError, OverflowError) as exc:  # a constructor's conversion (dates, floats)
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _check_graph(root: yaml.Node, source: str) -> None:
    """Refuse a node graph whose expansion is too big, recursive or too deep, or that
    writes a key twice; linear in the graph's size (a shared node is sized once)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # an iterative post-order walk: (node, key path, depth, children already pushed?)
    stack: list[tuple[yaml.Node, KeyPath, int, bool]] = [(root, (), 0, False)]
    while stack:
        node, path, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_NODES:
                raise ConfigError(_at(source, node, path,
                                      f"the document expands to more than {MAX_NODES:,} YAML "
                                      "nodes (an alias counts as a copy of what it names): "
                                      "expected a file written by hand"))
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(_at(source, node, path, "an alias refers to the anchor that "
                                                      "contains it (a recursive document)"))
        if depth > MAX_DEPTH:
            raise ConfigError(_at(source, node, path, f"nested more than {MAX_DEPTH} levels"))
        on_path.add(key)
        stack.append((node, path, depth, True))
        if isinstance(node, yaml.MappingNode):
            _check_duplicate_keys(node, path, source)
            for k, v in node.value:
                sub = (*path, k.value) if isinstance(k, yaml.ScalarNode) else path
                stack.append((k, path, depth + 1, False))
                stack.append((v, sub, depth + 1, False))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, i), depth + 1, False)
                         for i, item in enumerate(node.value))


def _at(source: str, node: yaml.Node, path: KeyPath, what: str) -> str:
    shown = dotted(path[:8]) + ("..." if len(path) > 8 else "")
    return f"{source}:{node.start_mark.line + 1}: {shown}: {what}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_duplicate_keys(node: yaml.MappingNode, path: KeyPath, source: str) -> None:
    """A key written twice in one mapping: name both lines (merged-in keys may repeat)."""
    first: dict[tuple[str, str], int] = {}
    for k, _ in node.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag == _MERGE_TAG:
            continue
        ident = (k.tag, k.value)
        if ident in first:
            raise ConfigError(_at(source, k, (*path, k.value),
                                  f"duplicate key (first at line {first[ident]}; YAML would "
                                  "silently keep only the last)"))
        first[ident] = k.start_mark.line + 1


def parse_document(text: str, source: str, what: str = "configuration"
                   ) -> tuple[dict[str, Any], Lines]:
    """The YAML mapping of a file and the line of every key path in it."""
    doc, node = load_yaml(text, source, what)
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping of {what} keys at the top level")
    lines: Lines = {}
    if node is not None:
        _lines(node, (), lines, set())
    return doc, lines


def _lines(node: yaml.Node, path: KeyPath, out: Lines, seen: set[int]) -> None:
    """Record the 1-based line of every key path in a composed YAML document.

    A node reached again through an alias is not walked again: a key path inside it is
    then located at the alias (the deepest recorded prefix), which is where it was written.
    """
    out[path] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = (*path, key.value)
            out[sub] = key.start_mark.line + 1
            if not isinstance(value, yaml.ScalarNode):
                _lines(value, sub, out, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out, seen)


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
                               "literal", "dict_", "list_", "too_", "finite_")):
        return f"{msg[0].lower()}{msg[1:]}, got {quote(got)}"
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
        raise ConfigError(f"--set {quote(text)}: expected key.path=value")
    key, _, raw = text.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {quote(text)}: the key path is empty")
    if not raw.strip():
        return parts, ""
    try:
        value, _ = load_yaml(raw, "value", "value")
    except ConfigError as exc:
        raise ConfigError(f"--set {quote(text)}: the value is not valid YAML ({exc})") from None
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
                raise ConfigError(f"--set {quote(text)}: {where}: no list item {quote(part)} "
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
            raise ConfigError(f"--set {quote(text)}: {where}: cannot set a key inside "
                              f"{quote(node)}")


def apply_overrides(doc: dict[str, Any], overrides: list[str] | None) -> None:
    """Apply every `--set key.path=value` to the raw document, in order."""
    for text in overrides or []:
        parts, value = parse_override(text)
        apply_override(doc, parts, value, text)


def _list_index(items: list[Any], part: str) -> int | None:
    if part.isascii() and part.isdigit():
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
