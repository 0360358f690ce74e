"""The source article's demo, on the taskfuse runtime: 12 tasks, 4 workers, a watchdog.

Tasks with i % 3 == 0 sleep 1 s under a 2 s timeout; the others sleep 4 s under a 5 s
timeout. All 12 succeed in about 10-12 s (36 s of sleeping over 4 workers). With
`--short-sleep 3` the four short-timeout tasks overstay their 2 s: the watchdog marks them
TIMEOUT (max_retry 0, so a timeout is final) and their late results are discarded.

    python examples/seed_demo.py
    python examples/seed_demo.py --short-sleep 3
    python examples/seed_demo.py --scale 0.1        # the same run, ten times faster
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

from taskfuse.core.task import Task
from taskfuse.runtime import App, Runner, TaskContext
from taskfuse.store import open_store

app = App("seed-demo")


@app.task("sleep", max_retry=0)
def sleep_task(ctx: TaskContext, payload: dict[str, Any]) -> str:
    """Sleep like the article's demo_task, but wake up at once when told to stop."""
    if ctx.sleep(payload["sleep"]):
        return "stopped"  # timed out or canceled: this result is discarded anyway
    return f"task_{payload['i']}_done"


@dataclass(frozen=True)
class DemoResult:
    tasks: list[Task]
    elapsed_s: float


def run_demo(
    short_sleep: float = 1.0,
    long_sleep: float = 4.0,
    scale: float = 1.0,
    workers: int = 4,
    store_url: str = "memory://",
) -> DemoResult:
    """Run the 12 tasks and return their final records; `scale` shrinks every duration."""
    runner = Runner(app, open_store(store_url), workers=workers, watchdog_s=0.5 * scale)
    with runner:
        started = time.monotonic()
        specs = []
        for i in range(12):
            short = i % 3 == 0
            sleep = (short_sleep if short else long_sleep) * scale
            timeout = (2.0 if short else 5.0) * scale
            specs.append(runner.spec("sleep", {"i": i, "sleep": sleep}, timeout=timeout,
                                     task_id=f"demo-{i}"))
        tasks = runner.submit_many(specs)
        runner.join()
        elapsed = time.monotonic() - started
        records = [runner.get(t.task_id) for t in tasks]
    return DemoResult([r for r in records if r is not None], elapsed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short-sleep", type=float, default=1.0,
                        help="seconds the i %% 3 == 0 tasks sleep (timeout 2 s); 3 times out")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    result = run_demo(args.short_sleep, scale=args.scale, workers=args.workers)
    print(f"{'task':<8} {'timeout':>7}  {'status':<8} {'took':>6}  result / error")
    for task in result.tasks:
        took = (task.finished_at or 0.0) - (task.started_at or task.finished_at or 0.0)
        detail = task.result if task.error_kind is None else f"{task.error_kind}: {task.error_msg}"
        print(f"{task.task_id:<8} {task.timeout:>6g}s  {task.status.value:<8} {took:>5.2f}s  "
              f"{detail}")
    counts: dict[str, int] = {}
    for task in result.tasks:
        counts[task.status.value] = counts.get(task.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"\n12 tasks on {args.workers} workers: {summary} in {result.elapsed_s:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
