"""W3C Trace Context for outgoing HTTP calls: a task's trace_id as a `traceparent` header.

A downstream that logs the `traceparent` it receives (most gateways and tracing agents do)
can then be searched for the same trace as the worker's own log lines, and
`taskfuse inspect ID` finds the task from either form of the id.

Format (Trace Context level 1, version 00)::

    traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<flags: 2 hex>

How a task's trace_id becomes the 32-hex W3C trace-id (`w3c_trace_id`), deterministically,
so every attempt of a task, in any process, sends the same trace-id:

* 32 lowercase hex digits (a caller passed a W3C trace-id at submit): used as it is;
* 16 hex digits (what the core generates): kept as the RIGHT half, and the left half is the
  first 16 hex digits of sha256("taskfuse:" + id). The specification asks systems with
  8-byte ids to fill the extra bytes with "random values or a function of" something rather
  than zeroes; a hash is such a function, and 64-bit systems that keep only the right-most
  8 bytes see the task's own id again;
* anything else (a caller's free-form id): the first 32 hex digits of sha256 of it — stable,
  but one-way, so pass hex ids when the mapping back matters.

The parent-id (span id) is new for every call (8 random bytes): each outgoing request is its
own span of the task's trace. Flags are 01 (sampled), so the downstream records it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

HEADER = "traceparent"
VERSION = "00"
SAMPLED = "01"

_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO16 = "0" * 16
_ZERO32 = "0" * 32


class TraceparentError(ValueError):
    """A traceparent header value that the specification says to ignore."""


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed traceparent value: the trace it belongs to, and the caller's span."""

    trace_id: str
    parent_id: str
    flags: str = SAMPLED
    version: str = VERSION

    def __str__(self) -> str:
        return f"{self.version}-{self.trace_id}-{self.parent_id}-{self.flags}"


def _digest(text: str) -> str:
    return hashlib.sha256(f"taskfuse:{text}".encode()).hexdigest()


def w3c_trace_id(trace_id: str) -> str:
    """The 32-hex W3C trace-id of a task's trace_id (see the module doc for the rules)."""
    if _HEX32.fullmatch(trace_id) and trace_id != _ZERO32:
        return trace_id
    if _HEX16.fullmatch(trace_id):
        return _digest(trace_id)[:16] + trace_id
    return _digest(trace_id)[:32]


def task_trace_ids(w3c_id: str) -> list[str]:
    """The task trace_ids a 32-hex W3C trace-id may stand for, most likely first.

    Used by `taskfuse inspect` so the id seen in a downstream's logs finds the task: the id
    itself (a caller's W3C id), and its right half when the left half is our hash of it.
    """
    w3c_id = w3c_id.lower()
    if not _HEX32.fullmatch(w3c_id):
        return []
    out = [w3c_id]
    right = w3c_id[16:]
    if w3c_trace_id(right) == w3c_id:
        out.append(right)
    return out


def new_span_id() -> str:
    """Eight random bytes as 16 hex digits, never all zero (which the spec forbids)."""
    while True:
        span = secrets.token_hex(8)
        if span != _ZERO16:
            return span


def traceparent(trace_id: str, span_id: str | None = None) -> str:
    """The `traceparent` value for one outgoing call of the task with `trace_id`."""
    return str(TraceParent(w3c_trace_id(trace_id), span_id or new_span_id()))


def headers(trace_id: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """HTTP headers for one outgoing call: `extra` plus a fresh `traceparent`."""
    out = dict(extra or {})
    out[HEADER] = traceparent(trace_id)
    return out


def parse(value: str) -> TraceParent:
    """Parse a traceparent header value; raises TraceparentError for one to ignore.

    Version ff and all-zero ids are invalid; a version above 00 may carry more fields after
    a dash, which are ignored as the specification says.
    """
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        raise TraceparentError(f"not a traceparent value: {value!r}")
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == VERSION and rest):
        raise TraceparentError(f"traceparent of an invalid version: {value!r}")
    if trace_id == _ZERO32 or parent_id == _ZERO16:
        raise TraceparentError(f"traceparent with an all-zero id: {value!r}")
    return TraceParent(trace_id, parent_id, flags, version)


def trace_id_from(text: str) -> str:
    """A trace_id to store on a new task, from what a caller passed at submit.

    A traceparent value continues the caller's trace (its 32-hex trace-id is kept); any
    other text is the trace_id itself, lowercased when it is hex so headers stay valid.
    """
    text = text.strip()
    if "-" in text and _TRACEPARENT.fullmatch(text):
        return parse(text).trace_id
    lowered = text.lower()
    if _HEX16.fullmatch(lowered) or _HEX32.fullmatch(lowered):
        return lowered
    return text
