"""One worker process of the throughput benchmark: a Runner that drains a store of no-op tasks.

    python -m benchmarks.fleet_worker STORE_URL WORKERS

It opens the store and builds its Runner, prints "ready", waits for a line on stdin (the
benchmark's start signal, so process start-up is not timed), runs until no task is PENDING
or RUNNING, and prints "done CLAIMED" before it exits.
"""

from __future__ import annotations

import sys

from taskfuse.runtime import App, Runner
from taskfuse.store import open_store

app = App("bench")


@app.task("noop", timeout=60)
def noop(ctx: object, payload: object) -> None:
    return None


def main(argv: list[str]) -> int:
    url, workers = argv[0], int(argv[1])
    store = open_store(url)
    runner = Runner(app, store, workers=workers, heartbeat_s=10.0)
    print("ready", flush=True)
    sys.stdin.readline()
    with runner:
        runner.join(600)
    print(f"done {runner.stats.claimed}", flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
