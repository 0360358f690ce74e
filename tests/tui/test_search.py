"""Incremental search over ids: substring first, fuzzy when nothing contains the query."""

from __future__ import annotations

import numpy as np
import pytest

from tui import search
from tui.search import WordSearch


def test_substring_finds_every_word_containing_the_query_once() -> None:
    words = ["skus-1", "skus-10", "skus-2", "sku-1x", "other"]
    ws = WordSearch(words)
    assert list(ws.find("kus-1").codes) == [0, 1]
    assert list(ws.find("sku").codes) == [0, 1, 2, 3]
    assert not ws.find("kus-1").fuzzy


def test_words_added_later_are_searched_too() -> None:
    words = ["a1", "b2"]
    ws = WordSearch(words)
    assert list(ws.find("2").codes) == [1]
    words += ["c2", "d22"]  # the index grows with the word list, one segment per growth
    assert list(ws.find("2").codes) == [1, 2, 3]


def test_fuzzy_when_no_word_contains_the_query() -> None:
    ws = WordSearch(["skus-12", "skus-21", "payments-1"])
    found = ws.find("S12")  # s..1..2 in order, any case
    assert found.fuzzy and list(found.codes) == [0]
    assert list(ws.find("zz").codes) == []


def test_fuzzy_is_skipped_above_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "FUZZY_MAX_WORDS", 2)
    found = WordSearch(["ab", "cd", "ef"]).find("ae")
    assert found.fuzzy_skipped and not len(found.codes)


@pytest.mark.parametrize("words", [[f"t{i:05d}" for i in range(3000)],
                                   [f"tâche-{i}" for i in range(3000)]],
                         ids=["ascii", "not-ascii"])
def test_queries_matching_most_words_agree_with_a_plain_scan(words: list[str]) -> None:
    """Past a share of matches the bytes are compared as arrays (or, not ASCII, a loop)."""
    ws = WordSearch(words)
    for q in ("t", "0", "1", "00", "e-1", "99"):
        expected = [i for i, w in enumerate(words) if q in w]
        assert list(ws.find(q).codes) == expected, q
    assert ws.find("t").codes.dtype == np.int64
