"""Every number is bounded, every bad input is one line and exit 2 (issue 27, items 4 and 8).

The same bounds (taskfuse.core.bounds) hold where a number comes in: the command line, a
limits file, the API (`TaskSpec`, `App.task`). Inputs that used to end in "internal error"
(exit 1) or a hang are here too: JSON nested 30k deep, a 5,000-digit integer, bytes that are
not UTF-8 in a name, an integer above 2^63 for SQLite, a FIFO given as a file.
"""

from __future__ import annotations

import math
import os
import re
import threading
from pathlib import Path

import pytest

from taskfuse.cli import main
from taskfuse.configfile import ConfigError
from taskfuse.core.scheduler import Scheduler, SchedulerError
from taskfuse.core.task import TaskSpec
from taskfuse.limits.files import load_limits
from taskfuse.runtime import App
from taskfuse.runtime.errors import RuntimeConfigError
from taskfuse.store import open_store
from tests.hostile import answer_of

APP = "tests.runtime.sample_app:app"
#: Not UTF-8 as Python hands it over from argv (bytes 0xff 0xfe as lone surrogates).
NOT_UTF8 = b"\xff\xfe".decode("utf-8", "surrogateescape")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tasks.db'}"


@pytest.mark.parametrize(("flag", "value"), [
    ("--timeout", "nan"), ("--timeout", "1e308"), ("--timeout", "inf"), ("--timeout", "1e-300"),
    ("--timeout", "-1"), ("--max-retry", "1e3"), ("--max-retry", "100000"),
    ("--priority", str(2**63)), pytest.param("--priority", "9" * 5000, id="5000-digits"),
    ("--cap", "0"),
])
def test_a_number_flag_out_of_bounds_is_one_line(db: str, flag: str, value: str) -> None:
    answer = answer_of(main, ["submit", "--store", db, "echo", "--batch", "b", flag, value])
    answer.hold_to_promises()
    assert answer.code == 2 and f"argument {flag}: expected" in answer.err
    assert "9" * 100 not in answer.err  # a huge input is named by its length, not echoed


@pytest.mark.parametrize(("argv", "expected"), [
    (["worker", "--workers", "true"], "argument --workers: expected a whole number"),
    (["worker", "--workers", "100000"], "from 1 to 10000"),
    (["worker", "--lease", "1e-9"], "argument --lease: expected a number of seconds from 0.01"),
    (["worker", "--trace-interval", "nan"], "argument --trace-interval"),
    (["worker", "--metrics-port", "70000"], "from 0 to 65535"),
    (["sweep", "--every", "1e-9"], "argument --every"),
    (["sweep", "--max-pending-age", "1e308"], "argument --max-pending-age"),
])
def test_worker_and_sweeper_flags_are_bounded(db: str, argv: list[str], expected: str) -> None:
    ends = ["--app", APP, "--drain"] if argv[0] == "worker" else ["--once"]
    answer = answer_of(main, [*argv, "--store", db, *ends])
    answer.hold_to_promises()
    assert answer.code == 2 and expected in answer.err


@pytest.mark.parametrize(("text", "where"), [
    ("task_timeout_s: 1.0e+308", "task_timeout_s: input should be less than or equal to 2592000"),
    ("task_timeout_s: 1.0e-300", "task_timeout_s: input should be greater than or equal to"),
    ("task_timeout_s: .nan", "task_timeout_s"),
    ("watchdog_interval_s: 1.0e-9", "watchdog_interval_s"),
    ("sweeper: {heartbeat_s: 1.0e-9}", "sweeper.heartbeat_s"),
    ("sweeper: {lease_s: 1.0e+308}", "sweeper.lease_s"),
    ("workers: true", "workers"),
    ("claim_batch: true", "claim_batch"),
    ("kinds: {echo: {max_retry: true}}", "kinds.echo.max_retry"),
    ("kinds: {echo: {priority: 18446744073709551616}}", "kinds.echo.priority"),
    ("retry: {backoff: {cap: 1.0e+308}}", "retry.backoff.cap"),
    ("downstreams: {p: {client: {timeout_s: 1.0e-300}}}", "downstreams.p.client.timeout_s"),
])
def test_a_limits_file_number_out_of_bounds_is_refused(tmp_path: Path, text: str,
                                                       where: str) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=f"limits.yaml:1: {where}"):
        load_limits(path)
    answer = answer_of(main, ["submit", "--store", "memory://", "echo", "--limits", str(path)])
    answer.hold_to_promises()
    assert answer.code == 2 and where.split(":")[0] in answer.err


def test_a_kind_the_app_does_not_define_is_refused_with_its_line(tmp_path: Path,
                                                                 db: str) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text("workers: 2\nkinds:\n  echo: {timeout_s: 5}\n  ecoh: {timeout_s: 5}\n")
    answer = answer_of(main, ["worker", "--store", db, "--app", APP, "--limits", str(path),
                              "--drain"])
    answer.hold_to_promises()
    assert answer.code == 2
    assert "limits.yaml:4: kinds.ecoh: the app defines no kind 'ecoh'" in answer.err


def test_a_fifo_given_as_limits_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "limits.fifo"
    os.mkfifo(fifo)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(answer_of(
        main, ["submit", "--store", "memory://", "echo", "--limits", str(fifo)])), daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():  # unblock the hung open so the thread can end, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("the command waited for a writer on the FIFO")
    [answer] = result
    answer.hold_to_promises()  # type: ignore[attr-defined]
    assert "not a regular file" in answer.err  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", [
    TaskSpec("k", timeout=math.nan), TaskSpec("k", timeout=1e308), TaskSpec("k", timeout=1e-300),
    TaskSpec("k", max_retry=True), TaskSpec("k", priority=2**64),  # type: ignore[arg-type]
    TaskSpec("k", timeout=math.inf),
])
@pytest.mark.parametrize("url", ["memory://", "sqlite"])
def test_the_api_holds_the_same_bounds_on_every_store(tmp_path: Path, spec: TaskSpec,
                                                      url: str) -> None:
    store = open_store(f"sqlite:///{tmp_path / 't.db'}" if url == "sqlite" else url)
    try:
        with pytest.raises(SchedulerError, match="must be a"):
            Scheduler(store).submit(spec, 1.0)
        assert not any(store.counts().values())  # nothing half-written
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


@pytest.mark.parametrize("fields", [{"timeout": math.nan}, {"timeout": 1e308},
                                    {"max_retry": 10**6}, {"priority": 2**63}])
def test_app_task_registration_holds_the_bounds(fields: dict[str, float]) -> None:
    with pytest.raises(RuntimeConfigError, match="must be a"):
        App().task("k", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--payload", "[" * 30_000 + "]" * 30_000], "--payload is nested too deep"),
    (["--payload", "1" * 5_000], "--payload cannot be read"),
    (["--key", NOT_UTF8], "argument --key: not valid UTF-8"),
    (["--batch", NOT_UTF8], "argument --batch: not valid UTF-8"),
    (["--payload", f'"{NOT_UTF8}"'], "argument --payload: not valid UTF-8"),
])
def test_inputs_that_were_internal_errors_are_one_line(db: str, argv: list[str],
                                                       expected: str) -> None:
    answer = answer_of(main, ["submit", "--store", db, "echo", *argv])
    answer.hold_to_promises()
    assert answer.code == 2 and expected in answer.err


def test_a_kind_that_is_not_utf8_is_one_line(db: str) -> None:
    answer = answer_of(main, ["submit", "--store", db, NOT_UTF8])
    answer.hold_to_promises()
    assert answer.code == 2 and "argument kind: not valid UTF-8: b'\\xff\\xfe'" in answer.err


def test_a_payload_nested_too_deep_for_json_is_refused_by_a_durable_store(db: str) -> None:
    """Through the API: the store's JSON encoder hits the recursion limit; PayloadError."""
    from taskfuse.store import PayloadError

    deep: list[object] = []
    for _ in range(30_000):
        deep = [deep]
    store = open_store(db)
    try:
        with pytest.raises(PayloadError, match="nested too deep"):
            Scheduler(store).submit(TaskSpec("k", deep), 1.0)
        assert not any(store.counts().values())
    finally:
        store.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", ["taskfuse", "lab"])
def test_a_malformed_ipv6_store_url_is_one_line(command: str) -> None:
    from lab.cli import main as lab_main

    url = "postgresql://u:secret@[::1/db"
    answer = (answer_of(main, ["status", "--store", url]) if command == "taskfuse"
              else answer_of(lab_main, ["watch", "--store", url]))
    # one line and exit 2 (not its time: loading the monitor's modules is slow when busy)
    assert answer.code == 2 and answer.err.count("\n") == 1, answer.err
    assert "Invalid IPv6 URL" in answer.err and "secret" not in answer.err


# -- the lab: every number of a scenario's world and every number flag (issue 27 leftovers) --

#: A scenario with a field of every class of number the world has; `{path}` below names one.
WORLD = """\
name: hostile
seed: 1
horizon_s: 600
sample_interval_s: 1.0
process_respawn_s: 0.2
workers: 2
pools:
  shared: {size: 2, outages: [{start_s: 10, end_s: 20}]}
downstreams:
  partner:
    safety_factor: 0.7
    provider:
      rate: 20
      burst: 5
      reject_latency_s: 0.01
      errors: {http_503: 0.01}
      latency: {dist: lognormal, mean: 0.1, cv: 0.5}
      capacity: {servers: 4, service: {dist: exponential, mean: 0.1}}
      outages: [{start_s: 30, end_s: 40, latency_s: 0.005}]
      slowdowns: [{start_s: 50, end_s: 60, factor: 2}]
business:
  pool: shared
  rate: 5
  schedule: [{at_s: 100, rate: 2}]
  query: {dist: uniform, low: 0.01, high: 0.02}
  gateway_timeout_s: 2
batches:
  - id: skus
    count: 50
    duplicates: 0.1
    arrival: {kind: poisson, start_s: 1, rate: 10}
    program:
      - db: {pool: shared, query: 0.02}
      - call: {downstream: partner, count: {dist: integers, low: 1, high: 3}}
      - hang: {probability: 0.01, duration: {dist: empirical, values: [1, 2]}}
faults: [{kind: worker_crash, at_s: 5, workers: 1}]
slo: {business_p99_s: 0.5, business_timeouts: 3, success_rate: 0.9}
"""
#: One field of each class (a key path for --set): seed, duration, period, time of the world,
#: latency, rate, rate that may be 0, factor, ratio, count, a distribution's parameters.
WORLD_FIELDS = [
    "seed", "horizon_s", "sample_interval_s", "process_respawn_s", "pools.shared.outages.0.end_s",
    "downstreams.partner.provider.reject_latency_s", "downstreams.partner.provider.rate",
    "downstreams.partner.provider.burst", "downstreams.partner.safety_factor",
    "downstreams.partner.provider.errors.http_503",
    "downstreams.partner.provider.latency.mean", "downstreams.partner.provider.latency.cv",
    "downstreams.partner.provider.capacity.servers",
    "downstreams.partner.provider.capacity.service.mean",
    "downstreams.partner.provider.outages.0.latency_s",
    "downstreams.partner.provider.slowdowns.0.factor", "business.rate",
    "business.schedule.0.at_s", "business.schedule.0.rate", "business.query.high",
    "business.gateway_timeout_s", "batches.0.count", "batches.0.duplicates",
    "batches.0.arrival.start_s", "batches.0.arrival.rate", "batches.0.program.0.db.query",
    "batches.0.program.1.call.count.high", "batches.0.program.2.hang.probability",
    "batches.0.program.2.hang.duration.values.0", "faults.0.at_s", "faults.0.workers",
    "slo.business_p99_s", "slo.business_timeouts", "slo.success_rate",
]
HOSTILE = ["nan", ".inf", "-1", "1e308", "1e-300", "true", "'5'"]


def _lab_answer(argv: list[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`lab ARGV` in this process, stopped where a valid input would start a run."""
    from lab.cli import main as lab_main
    from tests.hostile import WouldGoOn

    def would_run(*args: object, **kwargs: object) -> None:
        raise WouldGoOn

    for target in ("lab.simulate.run.run_scenario", "lab.sizing.sweep.run_sweep",
                   "lab.sizing.size.search", "lab.loadtest.runner.run_loadtest"):
        monkeypatch.setattr(target, would_run, raising=False)
    return answer_of(lab_main, argv)


def test_the_world_scenario_itself_is_valid(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The hostile cases below are refused for their value, not for a broken scenario."""
    path = tmp_path / "w.yaml"
    path.write_text(WORLD)
    answer = _lab_answer(["simulate", str(path), "--no-trace"], monkeypatch)
    assert answer.code is None, answer.err


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("field", WORLD_FIELDS)
def test_every_number_of_a_scenario_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               field: str, value: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORLD)
    answer = _lab_answer(["simulate", str(path), "--no-trace", "--set", f"{field}={value}"],
                         monkeypatch)
    answer.hold_to_promises()
    assert answer.code == 2, answer.err
    # where: the file, its line and the key (a list index reads [0] in the message)
    where = re.sub(r"\.(\d+)", r"[\1]", field).replace(".values[0]", ".values")
    assert "w.yaml:" in answer.err and where in answer.err, answer.err


@pytest.mark.parametrize("value", [v for v in HOSTILE if v != "'5'"] + ["0", "9" * 5000])
@pytest.mark.parametrize("argv", [
    ["simulate", "{file}", "--seed"], ["simulate", "{file}", "--watch", "--speed"],
    ["simulate", "{file}", "--max-tasks"],
    ["sweep", "{file}", "--vary", "workers=1,2", "--seed"],
    ["sweep", "{file}", "--vary", "workers=1,2", "--seeds"],
    ["sweep", "{file}", "--vary", "workers=1,2", "--jobs"],
    ["size", "{file}", "--vary", "workers=1,2", "--minimize", "makespan_s", "--budget"],
    ["loadtest", "{file}", "--time-scale"], ["loadtest", "{file}", "--seed"],
    ["compare", "{file}", "--tolerance"],
], ids=lambda argv: " ".join(a for a in argv if a != "{file}"))
def test_every_number_flag_of_the_lab_is_bounded(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 argv: list[str], value: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORLD)
    flag = argv[-1]
    full = [str(path) if a == "{file}" else a for a in argv]
    answer = _lab_answer([*full, value], monkeypatch)
    if answer.code is None:  # a valid value: 0 for a seed or --max-tasks (none); a tolerance
        # is a threshold that may be 0, so a tiny one is valid too (nothing divides by it)
        assert (flag, value) in {("--seed", "0"), ("--max-tasks", "0"), ("--tolerance", "0"),
                                 ("--tolerance", "1e-300")}
        return
    answer.hold_to_promises()
    assert f"argument {flag}: expected" in answer.err, answer.err
    assert "9" * 100 not in answer.err


@pytest.mark.parametrize("spec", ["nan..5", "1..inf", "1..1e308:1e300", "1e-300..1e-299:1e-301",
                                  "1..5:nan", "1..5:0", "9" * 5000 + "..1", "true..5"])
def test_a_sweep_range_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  spec: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORLD)
    for command in (["sweep"], ["size", "--minimize", "makespan_s"]):
        answer = _lab_answer([command[0], str(path), *command[1:], "--vary",
                              f"workers={spec}", "--jobs", "1"], monkeypatch)
        answer.hold_to_promises()
        assert answer.code == 2 and "--vary" in answer.err, answer.err


def test_an_slo_bound_that_reads_as_infinite_is_one_line(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(WORLD)
    answer = _lab_answer(["size", str(path), "--vary", "workers=1,2", "--minimize", "makespan_s",
                          "--slo", "business.p99_s<=1e999"], monkeypatch)
    answer.hold_to_promises()
    assert answer.code == 2 and "'1e999' is not a finite number" in answer.err
