"""Per-time indexes over a trace's events: tasks by state at any time, one task's history.

Why numpy and codes: a 1,000,000-task run has several million events. Held as Python lists
of strings they cost gigabytes and every question is a Python loop; held as small integer
columns (strings replaced by codes into a vocabulary) a question is one vectorized pass.

* `Decoder` turns raw event columns into an `EventChunk` of codes. It runs on the loading
  thread and owns the string -> code dictionaries; each chunk carries the strings it added,
  so the UI side's `TaskIndex` can extend its own code -> string lists without sharing state
  with the thread.
* `TaskIndex` (UI side) appends chunks. State moves (SUBMIT and MOVE events) become
  intervals `[start, end)` during which a task had a state; `end` is filled in when the task's
  next move arrives, so appending stays proportional to the chunk. Tasks in a state at `t`
  are the intervals with start <= t < end: a `searchsorted` on start, then one mask.
* Counts by state at `t` come from checkpoints of cumulative counts every `CHECKPOINT` moves
  plus at most that many deltas: O(log n) and no n x 6 matrix in memory.

Events are assumed to arrive in time order (the lab writes them so); each chunk is sorted by
time on decoding, so a writer that flushes slightly out of order within a chunk is fine.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from taskfuse.core.events import EventKind
from taskfuse.core.states import TaskStatus
from taskfuse.trace import EVENT_FIELDS
from tui.search import Found, WordSearch

STATES: tuple[str, ...] = tuple(s.value for s in TaskStatus)

KINDS: tuple[str, ...] = tuple(k.value for k in EventKind)
_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_STATE_CODE: dict[Any, int] = {s: i for i, s in enumerate(STATES)}
_SUBMIT, _MOVE = _KIND_CODE["submit"], _KIND_CODE["move"]
_ALERT, _BREAKER = _KIND_CODE["alert"], _KIND_CODE["breaker"]
_RUNNING_CODE, _PENDING_CODE = STATES.index("RUNNING"), STATES.index("PENDING")
#: Moves into these states are notable (the events panel lists them), and retries.
_NOTABLE_DST = np.array([STATES.index(s) for s in ("FAILED", "TIMEOUT", "CANCELED")], np.int8)
CHECKPOINT = 1024
_F = {name: i for i, name in enumerate(EVENT_FIELDS)}
#: String columns kept as codes into a vocabulary of their own.
VOCABS = ("task_id", "batch_id", "trace_id", "reason", "worker", "subject")


@dataclass(slots=True)
class EventChunk:
    """A run of decoded events: numeric columns, string columns as codes, new vocabulary."""

    t: np.ndarray
    kind: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    attempt: np.ndarray
    value: np.ndarray
    codes: dict[str, np.ndarray]
    new_words: dict[str, list[str]]
    other_kinds: list[str] = field(default_factory=list)
    #: (t, rule, firing?, value) of ALERT events: their dst is no task state, so kept apart.
    alerts: list[tuple[float, str, bool, float | None]] = field(default_factory=list)
    #: (t, subject, src, dst, reason) of BREAKER events.
    breakers: list[tuple[float, str, str, str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t)


def _factorize(
    col: Sequence[Any], table: dict[Any, int], dtype: Any, grow: bool = True
) -> tuple[np.ndarray, list[Any]]:
    """Codes of a column's values via `table` (value -> code; None is -1).

    Why this shape: Python-level work is done once per *distinct* value in the chunk
    (`dict.fromkeys` and `map` run in C over all of them), which is what makes decoding a
    1M-task trace take seconds rather than tens of seconds. With `grow`, unseen values get
    the next codes and are returned as new words; without, they map to -1.
    """
    uniques = list(dict.fromkeys(col))
    local = {u: i for i, u in enumerate(uniques)}
    get = table.get
    known = [get(u) for u in uniques]
    new: list[Any] = []
    for i, code in enumerate(known):
        if code is None:
            if grow:
                table[uniques[i]] = known[i] = len(table) - 1
                new.append(uniques[i])
            else:
                known[i] = -1
    mapping = np.asarray(known, dtype=dtype)
    idx = np.fromiter(map(local.__getitem__, col), dtype=np.int32, count=len(col))
    return mapping[idx], new


class Decoder:
    """Raw event columns -> `EventChunk`; keeps the vocabularies (one per loading thread)."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[Any, int]] = {name: {None: -1} for name in VOCABS}
        self._kinds: dict[Any, int] = {None: -1, **_KIND_CODE}

    def decode(self, cols: Sequence[Sequence[Any]]) -> EventChunk:
        t = np.asarray(cols[0], dtype=float)
        order = np.argsort(t, kind="stable")
        sorted_ = bool((order == np.arange(len(t))).all()) if len(t) else True
        pick = (lambda a: a) if sorted_ else (lambda a: a[order])
        kinds, other = _factorize(cols[_F["kind"]], self._kinds, np.int8)
        codes: dict[str, np.ndarray] = {}
        new_words: dict[str, list[str]] = {}
        for name in VOCABS:
            codes[name], words = _factorize(cols[_F[name]], self._tables[name], np.int32)
            new_words[name] = [str(w) for w in words]
        with np.errstate(invalid="ignore"):
            attempt = np.asarray(cols[_F["attempt"]], dtype=float)
        alerts, breakers = self._rare(cols, kinds, t)
        return EventChunk(
            pick(t), pick(kinds),
            pick(_factorize(cols[_F["src"]], _STATE_CODE, np.int8, grow=False)[0]),
            pick(_factorize(cols[_F["dst"]], _STATE_CODE, np.int8, grow=False)[0]),
            pick(attempt), pick(np.asarray(cols[_F["value"]], dtype=float)),
            {k: pick(v) for k, v in codes.items()}, new_words, other, alerts, breakers,
        )

    @staticmethod
    def _rare(
        cols: Sequence[Sequence[Any]], kinds: np.ndarray, t: np.ndarray
    ) -> tuple[list[Any], list[Any]]:
        """ALERT and BREAKER events as small tuples (few of them; their src/dst are words)."""
        sub, src, dst, val = (cols[_F[k]] for k in ("subject", "src", "dst", "value"))
        alerts = [
            (float(t[j]), str(sub[j]), dst[j] == "firing", val[j])
            for j in np.flatnonzero(kinds == _ALERT).tolist()
        ]
        breakers = [
            (float(t[j]), str(sub[j]), str(src[j]), str(dst[j]), str(cols[_F["reason"]][j]))
            for j in np.flatnonzero(kinds == _BREAKER).tolist()
        ]
        return sorted(alerts, key=lambda a: a[0]), sorted(breakers, key=lambda b: b[0])

@dataclass(frozen=True, slots=True)
class AlertRow:
    rule: str
    since: float | None
    value: float | None


@dataclass(frozen=True, slots=True)
class TaskRow:
    task_id: str
    state: str
    since: float
    attempt: int | None
    batch_id: str | None
    trace_id: str | None
    worker: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    t: float
    kind: str
    src: str | None
    dst: str | None
    reason: str | None
    attempt: int | None
    worker: str | None
    subject: str | None
    value: float | None
    task_id: str | None = None


@dataclass(frozen=True, slots=True)
class TaskHistory:
    """One task's whole story, with the sums a person asks first."""

    task_id: str
    trace_id: str | None
    batch_id: str | None
    rows: tuple[HistoryRow, ...]
    attempts: int
    waited_s: float
    queued_s: float
    running_s: float
    errors: tuple[str, ...]
    state: str | None


class _Grow:
    """A growable numpy column (amortized O(1) append)."""

    __slots__ = ("a", "n")

    def __init__(self, dtype: Any) -> None:
        self.a = np.empty(0, dtype=dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.a):
            bigger = np.empty(max(need, 2 * len(self.a), 1024), dtype=self.a.dtype)
            bigger[: self.n] = self.a[: self.n]
            self.a = bigger
        self.a[self.n : need] = values
        self.n = need

    @property
    def v(self) -> np.ndarray:
        return self.a[: self.n]


def _grown(a: np.ndarray, n: int, fill: int = -1) -> np.ndarray:
    """`a` with room for at least n entries (doubling; new room holds `fill`)."""
    if n <= len(a):
        return a
    out = np.full(max(n, 2 * len(a), 1024), fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


@dataclass(frozen=True, slots=True)
class Selection:
    """Tasks in a state at a time, matching a search: interval indexes, newest change first."""

    hits: np.ndarray

    def __len__(self) -> int:
        return len(self.hits)


class TaskIndex:
    """The events of a trace, indexed for the task table, drill-down, counts and alerts."""

    def __init__(self) -> None:
        self.words: dict[str, list[str]] = {name: [] for name in VOCABS}
        self.kinds: list[str] = list(KINDS)
        cols = {"t": float, "kind": np.int8, "src": np.int8, "dst": np.int8,
                "attempt": float, "value": float}
        self._ev = {name: _Grow(dt) for name, dt in cols.items()}
        self._ev |= {name: _Grow(np.int32) for name in VOCABS}
        # intervals: one per state move; event index, start, end, state
        self._iv = {"ev": _Grow(np.int64), "start": _Grow(float), "end": _Grow(float),
                    "state": _Grow(np.int8)}
        self._open = np.full(0, -1, dtype=np.int64)  # task code -> its open interval
        # task code -> trace / batch code: only SUBMIT events carry a trace_id in lab traces
        self._task_trace = np.full(0, -1, dtype=np.int32)
        self._task_batch = np.full(0, -1, dtype=np.int32)
        self._notable = _Grow(np.int64)  # event indexes the events panel lists
        self._ckpt = [np.zeros(len(STATES), dtype=np.int64)]
        self._totals = np.zeros(len(STATES), dtype=np.int64)
        self._alerts: list[tuple[float, str, bool, float | None]] = []
        self._breakers: dict[str, tuple[list[float], list[str]]] = {}
        self._task_of: dict[str, int] | None = None
        self._trace_of: dict[str, int] | None = None
        self.task_search = WordSearch(self.words["task_id"])
        self.trace_search = WordSearch(self.words["trace_id"])
        self._batch_cache: tuple[Any, ...] | None = None
        self._rank_cache: dict[str, np.ndarray] = {}

    @property
    def n_events(self) -> int:
        return self._ev["t"].n

    @property
    def n_tasks(self) -> int:
        return len(self.words["task_id"])

    @property
    def last_t(self) -> float | None:
        return float(self._ev["t"].v[-1]) if self.n_events else None

    def extend(self, chunk: EventChunk) -> None:
        """Append a chunk (decoded in order after the previous one)."""
        if not len(chunk):
            return
        for name, words in chunk.new_words.items():
            self.words[name].extend(words)
        self.kinds.extend(chunk.other_kinds)
        if chunk.new_words["task_id"]:
            self._task_of = None
        if chunk.new_words["trace_id"]:
            self._trace_of = None
        base = self.n_events
        for name in ("t", "kind", "src", "dst", "attempt", "value"):
            self._ev[name].extend(getattr(chunk, name))
        for name in VOCABS:
            self._ev[name].extend(chunk.codes[name])
        self._add_owners(chunk)
        self._add_intervals(chunk, base)
        self._add_notable(chunk, base)
        self._alerts.extend(chunk.alerts)
        for t, subject, _, dst, _ in chunk.breakers:
            times, states = self._breakers.setdefault(subject, ([], []))
            times.append(t)
            states.append(dst)

    def _add_owners(self, chunk: EventChunk) -> None:
        """Remember each task's trace and batch from the first event that names them."""
        n = self.n_tasks
        self._task_trace = _grown(self._task_trace, n)
        self._task_batch = _grown(self._task_batch, n)
        task = chunk.codes["task_id"]
        for name, owner in (("trace_id", self._task_trace), ("batch_id", self._task_batch)):
            code = chunk.codes[name]
            m = (task >= 0) & (code >= 0)
            sel, val = task[m], code[m]
            unset = owner[sel] < 0
            owner[sel[unset]] = val[unset]

    def _add_notable(self, chunk: EventChunk, base: int) -> None:
        k, src, dst = chunk.kind, chunk.src, chunk.dst
        move = k == _MOVE
        notable = ((k == _BREAKER) | (k == _ALERT) | (move & np.isin(dst, _NOTABLE_DST))
                   | (move & (src == _RUNNING_CODE) & (dst == _PENDING_CODE)))
        self._notable.extend(base + np.flatnonzero(notable))

    def _add_intervals(self, chunk: EventChunk, base: int) -> None:
        moves = np.flatnonzero(((chunk.kind == _MOVE) | (chunk.kind == _SUBMIT))
                               & (chunk.dst >= 0) & (chunk.codes["task_id"] >= 0))
        if not len(moves):
            self._ckpt_update(np.empty(0, np.int8), np.empty(0, np.int8))
            return
        task = chunk.codes["task_id"][moves].astype(np.int64)
        t = chunk.t[moves]
        first_iv = self._iv["ev"].n
        ends = np.full(len(moves), np.inf)
        order = np.argsort(task, kind="stable")
        same = task[order][1:] == task[order][:-1]
        ends[order[:-1][same]] = t[order[1:][same]]
        self._open = _grown(self._open, self.n_tasks)
        is_first = np.ones(len(moves), bool)
        is_first[order[1:][same]] = False
        firsts = np.flatnonzero(is_first)
        prev = self._open[task[firsts]]
        known = prev >= 0
        self._iv["end"].a[prev[known]] = t[firsts[known]]
        is_last = np.ones(len(moves), bool)
        is_last[order[:-1][same]] = False
        lasts = np.flatnonzero(is_last)
        self._open[task[lasts]] = first_iv + lasts
        self._iv["ev"].extend(base + moves)
        self._iv["start"].extend(t)
        self._iv["end"].extend(ends)
        self._iv["state"].extend(chunk.dst[moves])
        self._ckpt_update(chunk.src[moves], chunk.dst[moves])

    def _ckpt_update(self, src: np.ndarray, dst: np.ndarray) -> None:
        n_before = self._iv["ev"].n - len(dst)
        k = len(STATES)
        delta = np.zeros((len(dst), k), dtype=np.int64)
        delta[np.arange(len(dst)), dst] += 1
        has_src = src >= 0
        np.subtract.at(delta, (np.flatnonzero(has_src), src[has_src]), 1)
        cum = np.cumsum(delta, axis=0) + self._totals
        next_ck = len(self._ckpt) * CHECKPOINT
        while next_ck <= n_before + len(dst):
            self._ckpt.append(cum[next_ck - n_before - 1].copy())
            next_ck += CHECKPOINT
        if len(dst):
            self._totals = cum[-1].copy()

    def _word(self, vocab: str, code: int) -> str | None:
        return self.words[vocab][code] if code >= 0 else None

    # -- questions ----------------------------------------------------------------------

    def counts_at(self, t: float) -> dict[str, int]:
        """How many tasks were in each state at `t`: checkpoint + at most CHECKPOINT moves."""
        n = int(np.searchsorted(self._iv["start"].v, t, "right"))
        c = n // CHECKPOINT
        counts = self._ckpt[c].copy()
        lo = c * CHECKPOINT
        if n > lo:
            state = self._iv["state"].v[lo:n]
            counts += np.bincount(state, minlength=len(STATES))
            src = self._ev["src"].v[self._iv["ev"].v[lo:n]]
            src = src[src >= 0]
            counts -= np.bincount(src, minlength=len(STATES))
        return {s: int(x) for s, x in zip(STATES, counts, strict=True)}

    def _live(self, t: float) -> tuple[int, np.ndarray]:
        """Intervals in force at `t`: how many started by then, and the mask over those."""
        n = int(np.searchsorted(self._iv["start"].v, t, "right"))
        return n, self._iv["end"].v[:n] > t

    def _task_of_iv(self, n: int) -> np.ndarray:
        return self._ev["task_id"].v[self._iv["ev"].v[:n]]

    def select(self, t: float, state: str | None = None,
               tasks: np.ndarray | None = None) -> Selection:
        """Tasks in `state` (any if None) at `t`, only `tasks` (codes) if given; newest first."""
        n, mask = self._live(t)
        if state is not None:
            mask &= self._iv["state"].v[:n] == STATES.index(state)
        if tasks is not None:
            wanted = np.zeros(max(self.n_tasks, 1), bool)
            wanted[tasks] = True
            mask &= wanted[self._task_of_iv(n)]
        return Selection(np.flatnonzero(mask)[::-1])

    def position(self, selection: Selection, task_id: str) -> int | None:
        """Where task `task_id` is in `selection` (its row), None if it is not there."""
        code = self.task_code(task_id)
        if code is None or not len(selection):
            return None
        tasks = self._ev["task_id"].v[self._iv["ev"].v[selection.hits]]
        found = np.flatnonzero(tasks == code)
        return int(found[0]) if len(found) else None

    def order(self, selection: Selection, column: str | None, descending: bool = False
              ) -> Selection:
        """The selection sorted by a task-table column (`COLUMN_KEYS`), ties in its own
        order (newest change first); no column: that order, reversed if `descending`.
        Names sort as text through their vocabulary's ranks (cached while it does not
        grow), so a million rows sort in one numpy pass."""
        hits = selection.hits
        if column is None:
            return Selection(hits[::-1]) if descending else selection
        key = self._sort_key(hits, column)
        return Selection(hits[np.argsort(-key if descending else key, kind="stable")])

    def _sort_key(self, hits: np.ndarray, column: str) -> np.ndarray:
        ev = self._iv["ev"].v[hits]
        if column == "state":
            return self._iv["state"].v[hits].astype(np.int64)
        if column == "since":
            return self._iv["start"].v[hits]
        if column == "try":
            return np.nan_to_num(self._ev["attempt"].v[ev], nan=-1.0)
        vocab = {"task": "task_id", "batch": "batch_id", "trace": "trace_id",
                 "worker": "worker", "last reason": "reason"}[column]
        codes = self._ev[vocab].v[ev].astype(np.int64)
        owner = {"batch_id": self._task_batch, "trace_id": self._task_trace}.get(vocab)
        if owner is not None:  # as `_row` shows them: the event's, else the task's
            task = self._ev["task_id"].v[ev]
            codes = np.where(codes >= 0, codes, owner[task])
        ranks = self._ranks(vocab)
        return np.where(codes >= 0, ranks[np.maximum(codes, 0)], -1)

    def _ranks(self, vocab: str) -> np.ndarray:
        """Each word's place in its vocabulary sorted as text."""
        words = self.words[vocab]
        cached = self._rank_cache.get(vocab)
        if cached is None or len(cached) != len(words):
            ranks = np.empty(len(words), np.int64)
            ranks[np.argsort(np.array(words, dtype=str), kind="stable")] = np.arange(len(words))
            cached = self._rank_cache[vocab] = ranks if len(words) else np.zeros(1, np.int64)
        return cached

    def rows(self, selection: Selection, offset: int = 0, limit: int = 300) -> list[TaskRow]:
        """One page of a selection as table rows."""
        return [self._row(int(k)) for k in selection.hits[offset : offset + limit]]

    def tasks_at(
        self, t: float, state: str | None = None, query: str = "", limit: int = 300
    ) -> tuple[list[TaskRow], int]:
        """Tasks in `state` (any if None) at `t` matching `query`, newest change first."""
        tasks = self.search(query).codes if query else None
        sel = self.select(t, state, tasks)
        return self.rows(sel, 0, limit), len(sel)

    def _row(self, k: int) -> TaskRow:
        e = int(self._iv["ev"].v[k])
        ev = self._ev
        att = ev["attempt"].a[e]
        task = int(ev["task_id"].a[e])
        trace, batch = int(ev["trace_id"].a[e]), int(ev["batch_id"].a[e])
        return TaskRow(
            self._word("task_id", task) or "?",
            STATES[int(self._iv["state"].a[k])], float(self._iv["start"].a[k]),
            None if np.isnan(att) else int(att),
            self._word("batch_id", batch if batch >= 0 else int(self._task_batch[task])),
            self._word("trace_id", trace if trace >= 0 else int(self._task_trace[task])),
            self._word("worker", int(ev["worker"].a[e])),
            self._word("reason", int(ev["reason"].a[e])),
        )

    def search(self, query: str) -> Found:
        """Tasks whose task_id or trace_id contains `query` (fuzzily if none does)."""
        q = query.strip()
        by_task = self.task_search.find(q)
        by_trace = self.trace_search.find(q)
        if by_task.fuzzy != by_trace.fuzzy:  # a substring hit beats a fuzzy one
            if by_task.fuzzy:
                by_task = Found(np.empty(0, np.int64))
            else:
                by_trace = Found(np.empty(0, np.int64))
        codes = by_task.codes
        if len(by_trace.codes):  # masks, not sets: np.union1d/isin hash a million codes
            traces = np.zeros(max(len(self.words["trace_id"]), 1), bool)
            traces[by_trace.codes] = True
            owner = self._task_trace[: self.n_tasks]
            tasks = (owner >= 0) & traces[np.maximum(owner, 0)]
            tasks[codes] = True
            codes = np.flatnonzero(tasks)
        return Found(codes, by_task.fuzzy and by_trace.fuzzy,
                     by_task.fuzzy_skipped or by_trace.fuzzy_skipped)

    def find(self, query: str) -> np.ndarray:
        """Task codes a query names: that task id, else that trace's tasks, else a search."""
        q = query.strip()
        code = self.task_code(q)
        if code is not None:
            return np.array([code], np.int64)
        trace = self.trace_code(q)
        if trace is not None:
            return np.flatnonzero(self._task_trace[: self.n_tasks] == trace)
        return self.search(q).codes

    def task_code(self, task_id: str) -> int | None:
        if self._task_of is None:
            self._task_of = {w: i for i, w in enumerate(self.words["task_id"])}
        return self._task_of.get(task_id)

    def trace_code(self, trace_id: str) -> int | None:
        if self._trace_of is None:
            self._trace_of = {w: i for i, w in enumerate(self.words["trace_id"])}
        return self._trace_of.get(trace_id)

    def resolve(self, query: str) -> str | None:
        """The one task a drill-down query names: that task id, a trace's first task, or the
        only task a search finds; None when it names none, or several by search."""
        found = self.find(query)
        exact = self.trace_code(query.strip()) is not None
        if len(found) == 1 or (exact and len(found)):
            return self.words["task_id"][int(found[0])]
        return None

    def history(self, task_id: str, t: float | None = None) -> TaskHistory | None:
        """Every event of one task, with attempts, waits and errors summed up (up to `t`)."""
        code = self.task_code(task_id)
        if code is None:
            return None
        ev = self._ev
        rows_i = np.flatnonzero(ev["task_id"].v == code)
        rows = tuple(self._history_row(int(e)) for e in rows_i)
        shown = [r for r in rows if t is None or r.t <= t]
        return _summarize(
            task_id, self._word("trace_id", int(self._task_trace[code])),
            self._word("batch_id", int(self._task_batch[code])), shown, t,
        )

    def _history_row(self, e: int) -> HistoryRow:
        ev = self._ev
        src, dst, att = int(ev["src"].a[e]), int(ev["dst"].a[e]), ev["attempt"].a[e]
        return HistoryRow(
            float(ev["t"].a[e]), self.kinds[int(ev["kind"].a[e])],
            STATES[src] if src >= 0 else None, STATES[dst] if dst >= 0 else None,
            self._word("reason", int(ev["reason"].a[e])),
            None if np.isnan(att) else int(att),
            self._word("worker", int(ev["worker"].a[e])),
            self._word("subject", int(ev["subject"].a[e])), _f(ev["value"].a[e]),
            self._word("task_id", int(ev["task_id"].a[e])),
        )

    def notable(self, t: float, n: int, since: float | None = None) -> list[HistoryRow]:
        """The last `n` notable events at or before `t` (breakers, alerts, failures,
        timeouts, cancels, retries), newest first; with `since`, none before it."""
        idx = self._notable.v
        times = self._ev["t"].v[idx] if len(idx) else np.empty(0)
        k = int(np.searchsorted(times, t, "right"))
        first = 0 if since is None else int(np.searchsorted(times, since, "left"))
        picked = idx[max(first, k - n) : k][::-1]
        rows = []
        for e in picked.tolist():
            row = self._history_row(e)
            if row.kind == "alert":  # its dst is firing/resolved, not a task state
                row = replace(row, dst=None, reason=self._alert_word(row.t, row.subject))
            elif row.kind == "breaker":  # its dst is a breaker state, kept apart
                row = replace(row, dst=self.breaker_at(row.subject or "", row.t))
            rows.append(row)
        return rows

    def n_notable(self, t: float, since: float | None = None) -> int:
        """How many notable events there are at or before `t` (and from `since`)."""
        idx = self._notable.v
        times = self._ev["t"].v[idx] if len(idx) else np.empty(0)
        first = 0 if since is None else int(np.searchsorted(times, since, "left"))
        return max(0, int(np.searchsorted(times, t, "right")) - first)

    def _alert_word(self, t: float, rule: str | None) -> str:
        k = bisect.bisect_left(self._alerts, t, key=lambda a: a[0])
        for at, name, firing, _ in self._alerts[k:]:
            if at != t:
                break
            if name == rule:
                return "firing" if firing else "resolved"
        return "?"

    def batches_at(self, t: float) -> dict[str, tuple[dict[str, int], float | None]]:
        """Per batch named by events: counts by state at `t` and the nearest-rank p99 of the
        attempts that ended by then (for traces without batch series, e.g. a real worker's)."""
        key = (t, self._iv["ev"].n)
        if self._batch_cache is not None and self._batch_cache[0] == key:
            return self._batch_cache[1]  # type: ignore[no-any-return]
        names = self.words["batch_id"]
        out: dict[str, tuple[dict[str, int], float | None]] = {}
        if names:
            n, mask = self._live(t)
            batch = self._task_batch[self._task_of_iv(n)]
            states = self._iv["state"].v[:n].astype(np.int64)
            ok = mask & (batch >= 0)
            k = len(STATES)
            counts = np.bincount(batch[ok] * k + states[ok], minlength=len(names) * k)
            p99 = self._batch_p99(n, t, batch, len(names))
            for b, name in enumerate(names):
                row = counts[b * k : (b + 1) * k]
                out[name] = ({s: int(x) for s, x in zip(STATES, row, strict=True)}, p99[b])
        self._batch_cache = (key, out)
        return out

    def _batch_p99(self, n: int, t: float, batch: np.ndarray, n_batches: int
                   ) -> list[float | None]:
        start, end = self._iv["start"].v[:n], self._iv["end"].v[:n]
        ran = (self._iv["state"].v[:n] == _RUNNING_CODE) & (end <= t) & (batch >= 0)
        dur, owner = (end - start)[ran], batch[ran]
        out: list[float | None] = []
        for b in range(n_batches):
            d = dur[owner == b]
            if not len(d):
                out.append(None)
                continue
            rank = max(1, -(-99 * len(d) // 100)) - 1
            out.append(float(np.partition(d, rank)[rank]))
        return out

    def breaker_at(self, subject: str, t: float) -> str | None:
        """A breaker's state at `t` from its BREAKER events (exact, unlike a sample); None if
        the trace has no events for it."""
        found = self._breakers.get(subject)
        if found is None:
            return None
        times, states = found
        k = bisect.bisect_right(times, t)
        return states[k - 1] if k else "closed"

    def breaker_next(self, subject: str, t: float) -> tuple[float, str] | None:
        """The breaker's next change after `t` (time, state) if the events loaded hold one."""
        found = self._breakers.get(subject)
        if found is None:
            return None
        times, states = found
        k = bisect.bisect_right(times, t)
        return (times[k], states[k]) if k < len(times) else None

    def alerts_at(self, t: float) -> list[AlertRow]:
        """Alert rules firing at `t`, with the time each started firing (few events: a scan)."""
        firing: dict[str, AlertRow] = {}
        for at, rule, is_firing, value in self._alerts:
            if at > t:
                break
            if is_firing:
                firing.setdefault(rule, AlertRow(rule, at, value))
            else:
                firing.pop(rule, None)
        return list(firing.values())


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def _summarize(
    task_id: str, trace: str | None, batch: str | None, shown: list[HistoryRow],
    now: float | None,
) -> TaskHistory:
    """Sums over the moves shown; a task still queued or running counts up to `now`."""
    attempts = max((r.attempt or 0 for r in shown if r.kind == "move" and r.dst == "RUNNING"),
                   default=0)
    waited = sum(r.value or 0.0 for r in shown if r.kind == "wait")
    queued = running = 0.0
    state, since = None, None
    errors = []
    for r in shown:
        if r.kind not in ("move", "submit") or r.dst is None:
            continue
        if since is not None and state == "PENDING":
            queued += r.t - since
        elif since is not None and state == "RUNNING":
            running += r.t - since
        if r.src == "RUNNING" and r.dst != "SUCCESS" and r.reason:
            errors.append(r.reason)
        state, since = r.dst, r.t
    if now is not None and since is not None and state in ("PENDING", "RUNNING"):
        if state == "PENDING":
            queued += now - since
        else:
            running += now - since
    return TaskHistory(task_id, trace, batch, tuple(shown), attempts, waited, queued, running,
                       tuple(errors), state)
