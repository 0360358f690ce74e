"""The fleet view's search (`Store.search`): a part of a task's id, trace, kind, batch or
idempotency key finds it, on every store alike; LIKE's own wildcards in the text match only
themselves; the answer is bounded and newest first."""

from __future__ import annotations

import pytest

from taskfuse.core.task import Task
from taskfuse.store.sql import SEARCH_LIMIT, like_pattern
from tests.store.backends import memory_store, postgres_store, sqlite_store

STORES = {"memory": memory_store, "sqlite": sqlite_store, "postgres": postgres_store}


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    with STORES[request.param](tmp_path) as made:
        yield made


def _tasks() -> list[Task]:
    return [
        Task(task_id="d7b9e2c4", kind="email", trace_id="tr-1", batch_id="nightly"),
        Task(task_id="a1", kind="sync_sku", trace_id="tr-2", batch_id="b-50%_off",
             idempotency_key="sku-1042"),
        Task(task_id="a2", kind="email", trace_id="tr-3", batch_id="b-50xxoff"),
    ]


def _ids(found: list[Task]) -> list[str]:
    return [t.task_id for t in found]


def test_a_part_of_any_name_finds_its_task_newest_first(store) -> None:
    store.insert(_tasks())
    assert _ids(store.search("d7b9")) == ["d7b9e2c4"]  # a part of the id
    assert _ids(store.search("D7B9")) == ["d7b9e2c4"]  # any case
    assert _ids(store.search("tr-2")) == ["a1"]  # trace
    assert _ids(store.search("sync")) == ["a1"]  # kind
    assert _ids(store.search("night")) == ["d7b9e2c4"]  # batch
    assert _ids(store.search("1042")) == ["a1"]  # idempotency key
    assert _ids(store.search("email")) == ["a2", "d7b9e2c4"]  # newest first
    assert store.search("nothing-like-it") == []


def test_like_wildcards_match_only_themselves(store) -> None:
    store.insert(_tasks())
    assert _ids(store.search("50%_off")) == ["a1"]  # not b-50xxoff
    assert _ids(store.search("%")) == ["a1"]
    assert _ids(store.search("_")) == ["a1"]  # sync_sku, b-50%_off
    assert store.search("\\") == []


def test_the_answer_is_bounded(store) -> None:
    store.insert([Task(task_id=f"t{k:04d}", kind="k", trace_id=f"tr{k}") for k in range(250)])
    assert len(store.search("t", limit=10)) == 10
    assert _ids(store.search("t", limit=3)) == ["t0249", "t0248", "t0247"]
    assert len(store.search("t", limit=10**9)) == SEARCH_LIMIT
    assert len(store.search("t", limit=-5)) == 1


def test_like_pattern_escapes_its_wildcards() -> None:
    assert like_pattern("a%b_c\\d") == "%a\\%b\\_c\\\\d%"
