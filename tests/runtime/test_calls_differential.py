"""The simulator's client and the runtime's `ctx.downstream().call` decide alike, call by call.

One scenario's limits drive both drivers: the simulator (lab.simulate.sim.Simulation, its client
lab.simulate.client.Downstream in simpy) and the threaded runtime (a Runner with one worker thread,
task code calling `ctx.downstream("partner").call(fn)`), on a fake clock: the runtime's
pacing and backoff waits advance it instead of sleeping (the Runner's `waits` seam), and
the harness moves it to the core's next due time whenever the worker is idle. Both go
through the same script of provider answers (latency, error kind) per call, with a
bulkhead, a client token bucket, a breaker, per-call retries under a token budget and task
retries under a ratio budget all on.

What must be equal, in order: every admission answer, every breaker transition, every
per-call retry decision with its delay, every call (kind, latency) and every task move.

What this cannot show: a bulkhead queue. One worker never has two calls in flight, so the
bulkhead always admits; FIFO hand-over under contention is held by the runtime's threaded
tests and the core's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from lab.model.provider import TIMEOUT
from lab.scenario import parse_scenario
from lab.simulate.sim import Simulation
from taskfuse.core.events import Event, EventKind
from taskfuse.core.guard import Guard
from taskfuse.core.retry import RetryDecision, RetryPolicy
from taskfuse.core.scheduler import Idle
from taskfuse.core.states import TaskStatus
from taskfuse.runtime import App, Runner, TaskContext, TaskError
from taskfuse.store.memory import MemoryStore

SCENARIO = """
name: differential
seed: 11
horizon_s: 100000
workers: 1
task_timeout_s: 10000
retry:
  max_retry: 2
  backoff: {kind: exponential, base: 0.5, cap: 4, jitter: full}
  budget: {kind: ratio, ratio: 0.5, window_s: 10, min_per_s: 0.1}
downstreams:
  partner:
    provider: {latency: {dist: constant, value: 0.05}}
    client:
      timeout_s: 0.3
      bulkhead: 2
      rate_limit: {rate: 5, burst: 2}
      breaker: {failure_rate: 0.5, window: count, window_size: 6, minimum_calls: 4,
                open_wait_s: 2.0, half_open_probes: 1}
      retry:
        max_retry: 2
        backoff: {kind: exponential, base: 0.1, cap: 1, jitter: full}
        budget: {kind: tokens, capacity: 15, cost: 5, refund: 1}
batches:
  - id: b
    count: 8
    program:
      - call: {downstream: partner, count: 2}
"""

OK, R429, R503, BAD = None, "http_429", "http_503", "bad_params"
#: The provider's answers, call after call: (latency in seconds, error kind or None).
SCRIPT: list[tuple[float, str | None]] = [
    (0.05, OK), (0.05, OK),                         # b-0 succeeds; the bucket starts pacing
    (0.05, R429), (0.05, OK), (0.04, OK),           # a 429 retried, then fine
    (0.9, OK), (0.05, R503), (0.05, R503),          # a timeout (0.9 > 0.3), 503s: the
    (0.05, R503), (0.05, OK),                       # token budget runs dry, the breaker opens
    (0.05, OK), (0.05, BAD),                        # a fatal error ends a task at once
    (0.05, R429), (0.05, R429), (0.05, R429),
    (0.05, OK), (0.05, OK), (0.05, OK), (0.05, OK),
]
DEFAULT_ANSWER = (0.05, OK)


class Script:
    """The scripted provider answers, consumed in call order by whichever driver runs."""

    def __init__(self) -> None:
        self.answers = list(SCRIPT)

    def next(self) -> tuple[float, str | None]:
        return self.answers.pop(0) if self.answers else DEFAULT_ANSWER


class Log:
    """Every fuse decision and core event of one run, normalised for comparison."""

    def __init__(self) -> None:
        self.entries: list[tuple[Any, ...]] = []

    def add(self, *entry: Any) -> None:
        self.entries.append(tuple(round(x, 9) if isinstance(x, float) else x for x in entry))

    def event(self, e: Event) -> None:
        if e.kind == EventKind.MOVE:
            self.add("move", e.t, e.task_id, e.src, e.dst, e.reason, e.attempt)
        elif e.kind == EventKind.BREAKER:
            self.add("breaker", e.t, e.subject, e.src, e.dst, e.reason)
        elif e.kind == EventKind.CALL:
            self.add("call", e.t, e.task_id, e.subject, e.reason, e.attempt, e.value)


class RecordingGuard(Guard):
    """The same fuse objects as a built guard, with every answer written to a log."""

    __slots__ = ("admitting", "log")

    def __init__(self, guard: Guard, log: Log) -> None:
        super().__init__(guard.name, bulkhead=guard.bulkhead, bucket=guard.bucket,
                         breaker=guard.breaker, adaptive=guard.adaptive)
        self.log = log
        self.admitting = False

    def admit(self, waiter: Any, now: float) -> Any:
        self.admitting = True  # admit asks resume itself: log the answer once
        try:
            answer = super().admit(waiter, now)
        finally:
            self.admitting = False
        self.log.add("admit", now, *_answer(answer))
        return answer

    def resume(self, now: float) -> Any:
        answer = super().resume(now)
        if not self.admitting:
            self.log.add("resume", now, *_answer(answer))
        return answer

    def record(self, now: float, ok: bool, latency: float) -> list[Any]:
        self.log.add("record", now, ok, latency)
        return super().record(now, ok, latency)


def _answer(answer: Any) -> tuple[Any, ...]:
    wait = getattr(answer, "wait", None)
    return (type(answer).__name__.strip("_"), wait if wait is not None else
            getattr(answer, "retry_at", None))


class RecordingPolicy:
    """A per-call RetryPolicy whose decisions are logged (delegates everything)."""

    def __init__(self, policy: RetryPolicy, log: Log, now: Callable[[], float]) -> None:
        self.policy = policy
        self.log = log
        self.now = now

    def decide(self, retry: int, error: str, *args: Any) -> RetryDecision:
        decision = self.policy.decide(retry, error, *args)
        self.log.add("decide", self.now(), retry, error, decision.retry, decision.delay,
                     decision.reason)
        return decision


# -- the simulator -------------------------------------------------------------------------


class ScriptedProvider:
    """The simulated provider's `request`, answering from the script."""

    def __init__(self, env: Any, script: Script) -> None:
        self.env = env
        self.script = script

    def request(self, client_timeout: float | None) -> Any:
        latency, error = self.script.next()
        if client_timeout is not None and latency > client_timeout:
            yield self.env.timeout(client_timeout)
            return TIMEOUT
        yield self.env.timeout(latency)
        return error


def simulate() -> list[tuple[Any, ...]]:
    log = Log()
    sim = Simulation(parse_scenario(SCENARIO))
    ds = sim.downstreams["partner"]
    ds.provider = ScriptedProvider(sim.env, Script())  # type: ignore[assignment]
    ds.guard = sim.scheduler.add_guard(RecordingGuard(ds.guard, log))
    ds.policy = RecordingPolicy(ds.policy, log, lambda: sim.env.now)  # type: ignore[assignment]
    sim.record_history(log.event)
    sim.run()
    return log.entries


# -- the runtime, on a fake clock ----------------------------------------------------------


class FakeClock:
    """Time that moves only when told: by the call path's waits, by the scripted provider
    (in the worker thread) and by the harness (while the worker is idle)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


class FakeWaits:
    """The runner's `waits` seam: pacing and backoff advance the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock.t

    def pause(self, ctx: TaskContext, seconds: float) -> bool:
        self.clock.t += seconds
        return ctx.stopped


def run_runtime() -> list[tuple[Any, ...]]:
    log = Log()
    clock = FakeClock()
    script = Script()
    scenario = parse_scenario(SCENARIO)
    app = App.from_limits(scenario.limits(), "differential", seed=scenario.seed)

    def partner(timeout: float | None = None) -> str:
        latency, error = script.next()
        if timeout is not None and latency > timeout:
            clock.t += timeout
            raise TimeoutError("the partner did not answer in time")
        clock.t += latency
        if error is not None:
            raise TaskError(error, "scripted")
        return "ok"

    @app.task("task", downstreams=("partner",))
    def task(ctx: TaskContext, payload: Any) -> None:
        for _ in range(2):
            ctx.downstream("partner").call(partner)

    # prefetch=0: the one worker claims its next task after the last outcome is committed,
    # as the simulator's worker does (a prefetch would claim it while the task runs)
    runner = Runner(app, MemoryStore(), workers=1, clock=clock.now, waits=FakeWaits(clock),
                    sinks=[log.event], watchdog_s=3600, heartbeat_s=3600, worker_id="rt",
                    prefetch=0)
    guard = runner.scheduler.add_guard(RecordingGuard(runner.scheduler.guards["partner"], log))
    assert guard is runner.scheduler.guards["partner"]
    client = runner.clients["partner"]
    client.policy = RecordingPolicy(client.policy, log, clock.now)  # type: ignore[assignment]
    with runner:
        runner.submit_batch([runner.spec("task", 0, task_id=f"b-{i}") for i in range(8)], "b")
        _drive(runner, clock)
    return log.entries


def _drive(runner: Runner, clock: FakeClock, bound_s: float = 60.0) -> None:
    """Advance the fake clock to the core's next due time whenever nothing runs.

    With the runner's lock held and nothing claimed, running or waiting for its commit, the
    one worker is idle (or about to claim what is claimable now), so moving time on cannot
    skip anything it would do.
    """
    end = time.monotonic() + bound_s
    quiet = threading.Event()
    idle_at: list[float] = []  # fake times at which the claimer was told Idle
    claim = runner.scheduler.claim

    def watched(*args: Any, **kwargs: Any) -> Any:
        answer = claim(*args, **kwargs)
        if isinstance(answer, Idle):
            idle_at.append(args[1])
        return answer

    runner.scheduler.claim = watched  # type: ignore[method-assign]
    runner.work_changed()
    while time.monotonic() < end:
        with runner.lock:
            counts = runner.store.counts()
            if not (counts.get(TaskStatus.PENDING) or counts.get(TaskStatus.RUNNING)):
                return
            with runner.attempts.mu:  # nothing claimed, running or waiting for its commit
                idle = runner.attempts.idle()
            if idle and idle_at and idle_at[-1] == clock.t:  # and the claimer found nothing
                due = runner.scheduler.next_claimable_at(clock.t)
                if due is not None and due > clock.t:
                    clock.t = due
                runner.work_changed()
        quiet.wait(0.0005)  # progress only: correctness does not depend on this pause
    raise AssertionError(f"the runtime did not finish; fake time {clock.t}")


def test_simulator_and_runtime_make_the_same_decisions() -> None:
    simulated = simulate()
    real = run_runtime()
    kinds = {entry[0] for entry in simulated}
    # everything the test is about actually happened
    assert {"admit", "record", "decide", "call", "move", "breaker"} <= kinds
    assert any(e[0] == "admit" and e[2] == "Pace" for e in simulated)  # the bucket paced
    assert any(e[0] == "admit" and e[2] == "Rejected" for e in simulated)  # breaker refused
    assert any(e[0] == "decide" and e[6] == "retry budget exhausted" for e in simulated)
    assert any(e[0] == "call" and e[4] == "timeout" for e in simulated)
    moves = [e for e in simulated if e[0] == "move"]
    assert any(e[5] == "deferred: breaker open" for e in moves)
    assert any(e[4] == "PENDING" and "retryable" in (e[5] or "") for e in moves)  # task retry
    assert {e[4] for e in moves} >= {"SUCCESS", "FAILED"}
    for i, (a, b) in enumerate(zip(simulated, real, strict=False)):
        assert a == b, f"entry {i} differs:\n  sim     {a}\n  runtime {b}\nbefore: " + \
            "\n".join(map(str, simulated[max(0, i - 6):i]))
    assert len(simulated) == len(real)
