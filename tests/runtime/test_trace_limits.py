"""A worker's trace carries the limits it ran with, and `lab fit` writes them back.

A real `taskfuse worker --limits L.yaml --trace run.trace --drain` process (SQLite store)
works off a queue; `lab fit run.trace --out S.yaml` then writes a limits file that means
what L.yaml means (workers, timeouts, retries and budget, lease, pools, the partner's
fuses, batch caps), which `taskfuse worker --limits` and `lab simulate` both read. The one
thing it cannot keep, a downstream the run never called, is named in the file instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lab.cli import main as lab_main
from lab.scenario import load_scenario
from taskfuse.cli import main as taskfuse_main
from taskfuse.limits.files import load_limits
from taskfuse.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.runtime.fit_app:app"
TASKS = 30
LIMITS = """\
workers: 3
task_timeout_s: 20
retry:
  max_retry: 1
  backoff: {kind: fixed, base: 0.01, cap: 0.01, jitter: none}
  budget: {kind: tokens, capacity: 50}
sweeper: {interval_s: 30, lease_s: 9}
pools:
  batch: {size: 2, acquire_timeout_s: 5}
downstreams:
  partner:
    client:
      timeout_s: 1.5
      bulkhead: 2
      rate_limit: {rate: 500, burst: 20}
      breaker: {failure_rate: 0.9, open_wait_s: 2}
      retry: {max_retry: 3, backoff: {kind: exponential, base: 0.002, cap: 0.01}}
  spare:
    client: {bulkhead: 4}
batches:
  - {id: skus, cap: 2}
"""


def test_lab_fit_of_a_worker_trace_writes_back_the_limits_it_ran_with(tmp_path: Path,
                                                                      capsys) -> None:
    used = tmp_path / "L.yaml"
    used.write_text(LIMITS)
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    for sku in range(TASKS):
        assert taskfuse_main(["submit", "--store", url, "--app", APP, "--limits", str(used),
                              "sync_sku", "--payload", str(sku), "--batch", "skus"]) == 0
    capsys.readouterr()
    trace = tmp_path / "run.trace"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TASKFUSE_LIMITS", None)
    worker = subprocess.run(
        [sys.executable, "-m", "taskfuse.cli", "worker", "--store", url, "--app", APP,
         "--limits", str(used), "--trace", str(trace), "--drain"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert worker.returncode == 0, worker.stderr

    meta = read_trace(trace).header["meta"]
    assert meta["limits_file"] == str(used)
    assert meta["limits"]["downstreams"]["partner"]["client"]["bulkhead"] == 2

    out = tmp_path / "fitted" / "S.yaml"
    assert lab_main(["fit", str(trace), "--out", str(out), "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["limits_recorded"] and fit["limits_file"] == str(used)
    assert fit["batches"]["skus"]["arrival"]["count"] == TASKS
    written = tmp_path / "fitted" / "S.limits.yaml"
    text = written.read_text()
    assert f"started with the limits file {used}" in text
    assert "Left out: downstreams.spare: {client: {bulkhead: 4}}" in text

    fitted, original = load_limits(written), load_limits(used)
    expected = original.model_dump()
    del expected["downstreams"]["spare"]
    assert fitted.model_dump() == expected
    # the fitted world runs under that file in the lab, as the worker ran under L.yaml
    scenario = load_scenario(out)
    assert scenario.limits_source == str(written) and scenario.limits() == fitted
    assert scenario.batches[0].count == TASKS
    assert lab_main(["simulate", str(out), "--no-trace"]) == 0
