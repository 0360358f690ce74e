"""The source article's demo on the runtime: the states of both variants, never the seconds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from taskfuse.core.states import TaskStatus

DEMO = Path(__file__).resolve().parents[2] / "examples" / "seed_demo.py"
SCALE = 0.25  # every sleep and timeout x 0.25: the whole test takes about 5 s


def _load_demo():
    spec = importlib.util.spec_from_file_location("seed_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def test_all_twelve_succeed() -> None:
    result = _load_demo().run_demo(scale=SCALE)
    assert len(result.tasks) == 12
    assert {t.status for t in result.tasks} == {TaskStatus.SUCCESS}
    assert [t.result for t in result.tasks] == [f"task_{i}_done" for i in range(12)]


def test_short_sleep_3_times_out_the_four_short_timeout_tasks() -> None:
    result = _load_demo().run_demo(short_sleep=3.0, scale=SCALE)
    by_status = {t.task_id: t.status for t in result.tasks}
    timed_out = {f"demo-{i}" for i in range(12) if i % 3 == 0}
    assert {k for k, s in by_status.items() if s is TaskStatus.TIMEOUT} == timed_out
    assert {k for k, s in by_status.items() if s is TaskStatus.SUCCESS} == (
        {f"demo-{i}" for i in range(12)} - timed_out
    )
    for task in result.tasks:
        if task.status is TaskStatus.TIMEOUT:
            assert task.error_kind == "timeout" and task.result is None
            assert task.retry_count == 0  # max_retry 0: the timeout is final
