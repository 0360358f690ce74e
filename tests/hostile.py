"""Shared by the hostile-input tests: run a command's main() and hold it to the promises.

The promises (docs/operations.md, "Reliability"): bad input is one line on stderr and exit 2,
never a traceback; the answer costs at most `MAX_ANSWER_S` of CPU and peak memory stays under
`MAX_PEAK_MB`. In-process runs measure memory with tracemalloc; `run_measured` runs a command in
a fresh interpreter and reports its peak resident size, which counts everything.

The bound is CPU time, not wall time: beside a second test process and two busy loops the
worst file's 1.6 s took 6.4 s of wall time. A hang uses no CPU, so the wall time is held
too, to a bound a loaded machine cannot reach (`MAX_WALL_S`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_ANSWER_S = 5.0
MAX_WALL_S = 60.0
MAX_PEAK_MB = 500.0


@dataclass
class Answer:
    code: int | None  # None: the command was stopped where a valid input would go on
    err: str
    seconds: float  # CPU
    peak_mb: float
    wall_s: float = 0.0

    def hold_to_promises(self) -> None:
        """One line and exit 2 for an error; bounded time and memory whatever happened."""
        if self.code is not None:
            assert self.code == 2, (self.code, self.err)
            assert self.err.count("\n") == 1 and self.err.endswith("\n"), self.err
            assert "Traceback" not in self.err
        assert self.seconds < MAX_ANSWER_S, self.seconds
        assert self.wall_s < MAX_WALL_S, self.wall_s
        assert self.peak_mb < MAX_PEAK_MB, self.peak_mb


class WouldGoOn(Exception):
    """Raised by a stand-in at the point where a valid input would start the real work."""


def answer_of(main: Callable[[list[str]], int], argv: list[str]) -> Answer:
    """Run main(argv) in this process, capturing stderr, time and traced peak memory."""
    err = io.StringIO()
    tracemalloc.start()
    began, wall = time.process_time(), time.perf_counter()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code: int | None = main(argv)
    except WouldGoOn:
        code = None
    finally:
        seconds, wall = time.process_time() - began, time.perf_counter() - wall
        peak = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    return Answer(code, err.getvalue(), seconds, peak, wall)


#: The peak is this image's own high-water mark (VmHWM, which exec starts afresh), not
#: ru_maxrss: that one keeps the pre-exec high-water of the fork, i.e. the test process's
#: resident size (a pytest process grown to 530 MB read as a 530 MB answer).
_MEASURED = """
import json, os, resource, sys, time
def peak_mb():
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
began, wall = time.process_time(), time.perf_counter()
module = __import__(sys.argv[1], fromlist=["main"])
try:
    code = module.main(sys.argv[2:])
finally:
    with open(os.environ["HOSTILE_OUT"], "w") as fh:
        json.dump({"s": time.process_time() - began, "wall_s": time.perf_counter() - wall,
                   "rss_mb": peak_mb()}, fh)
sys.exit(code)
"""


def run_measured(module: str, argv: list[str], tmp: Path) -> Answer:
    """Run `python -m module argv` for real; its own time and peak resident memory."""
    out = tmp / "measured.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOSTILE_OUT": str(out)}
    proc = subprocess.run([sys.executable, "-c", _MEASURED, module, *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    measured = json.loads(out.read_text())
    return Answer(proc.returncode, proc.stderr, measured["s"], measured["rss_mb"],
                  measured["wall_s"])
