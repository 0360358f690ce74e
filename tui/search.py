"""Incremental search over a growing list of ids (task ids, trace ids): substring, then fuzzy.

Why not a Python loop per keystroke: a 1,000,000-task trace has a million task ids, and a
`[w for w in words if q in w]` pass costs ~60 ms whatever the query. The words are kept as
newline-joined segments (one per decoded chunk, so growing never copies what is there), and a
substring is found by `re.finditer` in C over each segment; a match position maps back to its
word with one `searchsorted` on the segment's word starts. A query that matches most words
(`t`, the first keystroke of any search) would cost a million match objects, so past a share
of matches (counted first with `str.count`, also C) the segment's bytes are compared with
the query as numpy arrays instead: one vectorized comparison per character of the query.

Fuzzy (the query's characters in order, any case: `s12` finds `sku-12`) is the fallback when
no id contains the query. It is a regex with lazy gaps, several times slower than a substring,
so it is only offered up to `FUZZY_MAX_WORDS` ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: Above this many ids, a query that matches nothing as a substring is not tried fuzzily.
FUZZY_MAX_WORDS = 200_000
#: Past this share of words matching, a plain loop is cheaper than regex match objects.
_LOOP_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Found:
    """The codes (positions in the word list) a query matched, and how it matched."""

    codes: np.ndarray
    fuzzy: bool = False
    fuzzy_skipped: bool = False  # nothing as a substring, and too many ids to try fuzzily


class WordSearch:
    """Searches `words` (a list owned elsewhere that only ever grows)."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self._segments: list[tuple[str, np.ndarray, int]] = []  # blob, word starts, first code
        self._bytes: dict[int, np.ndarray | None] = {}  # segment -> its bytes, if ASCII
        self._n = 0

    def _sync(self) -> None:
        """Index the words appended since the last search (one new segment)."""
        n = len(self.words)
        if n == self._n:
            return
        new = self.words[self._n : n]
        lengths = np.fromiter((len(w) + 1 for w in new), np.int64, count=len(new))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self._segments.append(("\n".join(new) + "\n", starts, self._n))
        self._n = n

    def find(self, query: str) -> Found:
        """Codes of the words containing `query`; if none, of the words matching it fuzzily."""
        if not query or "\n" in query:
            return Found(np.empty(0, np.int64))
        self._sync()
        codes = self.substring(query)
        if len(codes):
            return Found(codes)
        if self._n > FUZZY_MAX_WORDS:
            return Found(codes, fuzzy_skipped=True)
        return Found(self.fuzzy(query), fuzzy=True)

    def substring(self, query: str) -> np.ndarray:
        self._sync()
        total = sum(blob.count(query) for blob, _, _ in self._segments)
        if total == 0:
            return np.empty(0, np.int64)
        if total > _LOOP_SHARE * self._n and query.isascii():
            return self._many(query)
        return self._positions(re.compile(re.escape(query)))

    def _many(self, query: str) -> np.ndarray:
        """Words containing `query` when most do: compare bytes as arrays (ASCII segments),
        or loop over the words of a segment that is not ASCII."""
        q = np.frombuffer(query.encode(), np.uint8)
        out = []
        for k, (blob, starts, first) in enumerate(self._segments):
            data = self._bytes.get(k, False)
            if data is False:
                data = self._bytes[k] = np.frombuffer(blob.encode(), np.uint8) \
                    if blob.isascii() else None
            if data is None:
                words = self.words[first : first + len(starts)]
                out.append(np.fromiter((first + i for i, w in enumerate(words) if query in w),
                                       np.int64))
                continue
            n = len(data) - len(q) + 1
            hit = data[:n] == q[0]
            for j in range(1, len(q)):
                hit &= data[j : j + n] == q[j]
            pos = np.flatnonzero(hit)
            out.append(_words_at(starts, pos) + first)
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def fuzzy(self, query: str) -> np.ndarray:
        self._sync()
        gaps = "[^\n]*?".join(re.escape(c) for c in query)
        return self._positions(re.compile(gaps, re.IGNORECASE))

    def _positions(self, pattern: re.Pattern[str]) -> np.ndarray:
        out = []
        for blob, starts, first in self._segments:
            pos = np.fromiter((m.start() for m in pattern.finditer(blob)), np.int64)
            if len(pos):
                out.append(_words_at(starts, pos) + first)
        return np.concatenate(out) if out else np.empty(0, np.int64)


def _words_at(starts: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The words (indexes into `starts`) that sorted character positions fall in, each once.
    Positions come sorted, so a neighbour comparison dedupes (np.unique would hash)."""
    words = np.searchsorted(starts, pos, "right") - 1
    if len(words) < 2:
        return words
    return words[np.concatenate(([True], words[1:] != words[:-1]))]
