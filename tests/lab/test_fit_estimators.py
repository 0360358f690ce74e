"""Each estimator of `lab fit` on synthetic data whose truth is known, including the cases
where the data cannot tell (a limit never reached, a capacity never exceeded)."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from lab.fit.arrivals import fit_arrivals
from lab.fit.data import Calls
from lab.fit.estimate import wilson
from lab.fit.programs import count_spec
from lab.fit.provider import fit_provider
from lab.fit.provider_capacity import fit_capacity
from lab.fit.provider_errors import fit_errors
from lab.fit.ratelimit import fit_rate_limit
from lab.fit.service import fit_durations
from lab.fit.windows import find_outages, find_slowdowns
from taskfuse.core.ratelimit import TokenBucket


def calls(start: np.ndarray, end: np.ndarray, outcome: list[str] | np.ndarray) -> Calls:
    order = np.argsort(start, kind="stable")
    n = len(start)
    return Calls(np.asarray(start, float)[order], np.asarray(end, float)[order],
                 np.asarray(outcome, object)[order], np.full(n, None, object),
                 np.ones(n, int))


def lognormal(rng: np.random.Generator, mean: float, cv: float, n: int) -> np.ndarray:
    s2 = np.log1p(cv * cv)
    return rng.lognormal(np.log(mean) - s2 / 2, np.sqrt(s2), n)


# -- durations -----------------------------------------------------------------------------


def test_lognormal_by_mean_and_cv_with_intervals_that_hold_the_truth() -> None:
    x = lognormal(np.random.default_rng(1), 0.2, 0.5, 3000)
    fit = fit_durations(x, "t")
    assert fit is not None and fit.family == "lognormal"
    assert fit.mean.lo <= 0.2 <= fit.mean.hi and fit.cv.lo <= 0.5 <= fit.cv.hi
    assert fit.ks < 0.03 and fit.spec()["dist"] == "lognormal"


def test_censored_samples_keep_the_fit_unbiased() -> None:
    x = lognormal(np.random.default_rng(2), 0.2, 0.5, 4000)
    kept = x[x < 0.3]  # a client timeout at 0.3 s hides the slowest 17 %
    fit = fit_durations(kept, "t", censored=len(x) - len(kept))
    plain = fit_durations(kept, "t")
    assert fit is not None and plain is not None
    assert fit.mean.value == pytest.approx(0.2, rel=0.05)
    assert plain.mean.value < 0.18  # ignoring the censoring would be 10 % off and more


def test_exponential_data_is_written_as_exponential_and_constants_as_numbers() -> None:
    fit = fit_durations(np.random.default_rng(3).exponential(0.1, 3000), "e")
    assert fit is not None and fit.spec()["dist"] == "exponential"
    assert fit.spec()["mean"] == pytest.approx(0.1, rel=0.05)
    const = fit_durations(np.full(20, 4.0), "c")
    assert const is not None and const.spec() == 4.0


def test_a_tail_the_lognormal_misses_is_written_as_percentiles() -> None:
    rng = np.random.default_rng(4)
    x = np.concatenate([lognormal(rng, 0.1, 0.2, 2000), rng.uniform(0.5, 1.0, 60)])
    fit = fit_durations(x, "tail")
    assert fit is not None and fit.family == "empirical"
    assert fit.spec()["percentiles"][99] == pytest.approx(np.percentile(x, 99), rel=1e-3)
    assert fit.ks_by_family["lognormal"] > 0  # the family's figures stay in the report


# -- the provider's token bucket -----------------------------------------------------------


def bucket_run(rate: float, burst: float, offered: float, seconds: float,
               seed: int) -> Calls:
    """Poisson requests at `offered`/s through a bucket; 429s come back in 10 ms."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / offered, int(offered * seconds)))
    bucket = TokenBucket(rate, burst)
    ok = np.array([bucket.try_acquire(x) for x in t])
    latency = np.where(ok, 0.1, 0.01)
    return calls(t, t + latency, np.where(ok, "ok", "http_429"))


def test_rate_and_burst_come_from_when_429s_start() -> None:
    fit = fit_rate_limit(bucket_run(20.0, 8.0, 50.0, 30.0, seed=5))
    assert fit.rate.value == pytest.approx(20.0, rel=0.02)
    assert fit.rate.lo <= 20.0 <= fit.rate.hi
    assert fit.burst.value == pytest.approx(8.0, abs=1.0)
    assert fit.replayed_429 == pytest.approx(fit.rejected, rel=0.02)


def test_a_limit_never_reached_is_not_identifiable() -> None:
    fit = fit_rate_limit(bucket_run(100.0, 20.0, 30.0, 20.0, seed=6))
    assert fit.rate.value is None and "no 429" in fit.rate.note
    assert fit.peak_1s > 0


# -- capacity ------------------------------------------------------------------------------


def fifo_run(servers: int, rate: float, n: int, seed: int) -> Calls:
    """Poisson arrivals into `servers` FIFO servers with lognormal service (mean 0.2)."""
    rng = np.random.default_rng(seed)
    arrive = np.cumsum(rng.exponential(1 / rate, n))
    service = lognormal(rng, 0.2, 0.5, n)
    free = [0.0] * servers
    end = np.empty(n)
    for i, (a, s) in enumerate(zip(arrive, service, strict=True)):
        start = max(a, heapq.heappop(free))
        end[i] = start + s
        heapq.heappush(free, end[i])
    return calls(arrive, end, ["ok"] * n)


def test_servers_from_the_latency_hinge_against_calls_in_flight() -> None:
    run = fifo_run(servers=5, rate=22.0, n=4000, seed=7)  # utilization 0.88
    fit = fit_capacity(run, np.ones(len(run), bool), "cap")
    assert fit.servers.value == 5
    assert fit.servers.lo <= 5 <= (fit.servers.hi or 5)
    assert 0 < fit.unqueued.sum() < len(run)  # the service is fitted on those


def test_capacity_never_exceeded_is_not_identifiable() -> None:
    rng = np.random.default_rng(8)
    t = np.cumsum(rng.exponential(1 / 20, 3000))
    run = calls(t, t + lognormal(rng, 0.2, 0.5, 3000), ["ok"] * 3000)  # no queue at all
    fit = fit_capacity(run, np.ones(len(run), bool), "cap")
    assert fit.servers.value is None
    assert f"servers >= {fit.max_in_flight}" in fit.servers.note


# -- windows and errors --------------------------------------------------------------------


def test_an_error_outage_and_a_slowdown_are_found_as_windows() -> None:
    rng = np.random.default_rng(9)
    t = np.sort(rng.uniform(0, 60, 3000))
    latency = lognormal(rng, 0.1, 0.3, len(t))
    slow = (t >= 35) & (t < 45)
    latency[slow] *= 3
    down = (t >= 10) & (t < 20)
    outcome = np.where(down, "http_503", np.where(rng.random(len(t)) < 0.05, "bad_params", "ok"))
    latency[down] = 0.005
    run = calls(t, t + latency, outcome)
    outages = find_outages(run)
    assert len(outages) == 1
    o = outages[0]
    assert o.mode == "error" and o.error == "http_503"
    assert o.start_s == pytest.approx(10, abs=0.2) and o.end_s == pytest.approx(20, abs=0.2)
    slowdowns = find_slowdowns(run, ~o.covers(run.start))
    assert len(slowdowns) == 1
    w = slowdowns[0]
    assert w.factor == pytest.approx(3, rel=0.15)
    assert w.start_s == pytest.approx(35, abs=0.3) and w.end_s == pytest.approx(45, abs=0.3)
    errors = fit_errors(run, ~o.covers(run.start))
    rate = errors.rates["bad_params"]
    assert rate.lo <= 0.05 <= rate.hi and "http_503" not in errors.rates


def test_wilson_interval_covers_zero_errors_sensibly() -> None:
    lo, hi = wilson(0, 2000)
    assert lo == 0 and 0.001 < hi < 0.002


# -- arrivals and programs -----------------------------------------------------------------


def test_arrivals_closed_poisson_and_a_schedule() -> None:
    assert fit_arrivals(np.full(100, 2.0), 50).spec() == {"kind": "closed", "start_s": 2.0}
    rng = np.random.default_rng(10)
    poisson = fit_arrivals(np.cumsum(rng.exponential(1 / 30, 3000)), 100)
    assert poisson.kind == "poisson" and poisson.rate.lo <= 30 <= poisson.rate.hi
    first = np.cumsum(rng.exponential(1 / 30, 1800))
    second = first[-1] + np.cumsum(rng.exponential(1 / 75, 1100))
    schedule = fit_arrivals(np.concatenate([first, second]), 100)
    assert schedule.kind == "schedule" and len(schedule.steps) == 2
    (_, r1), (at, r2) = schedule.steps
    assert r1.value == pytest.approx(30, rel=0.1) and r2.value == pytest.approx(75, rel=0.1)
    assert at == pytest.approx(first[-1], abs=1.0)


def test_call_counts_become_a_constant_integers_or_an_empirical_list() -> None:
    assert count_spec([2] * 50) == 2
    rng = np.random.default_rng(11)
    assert count_spec(rng.integers(1, 4, 600).tolist()) == {"dist": "integers", "low": 1,
                                                            "high": 3}
    skewed = count_spec([1] * 90 + [3] * 10)
    assert skewed["dist"] == "empirical" and skewed["values"].count(1) == 18


# -- slowdown or capacity: which explains the slow calls -----------------------------------


def pool_capped_run(seed: int) -> Calls:
    """20 connections (the incident's pool) each calling a provider with no capacity limit,
    a lognormal gap (mean 0.3 s) between calls; calls that start in 40..160 s are 4 times
    slower. Slow calls are then also the many-in-flight ones: a capacity look-alike."""
    rng = np.random.default_rng(seed)
    starts, ends = [], []
    for _ in range(20):
        t = float(rng.uniform(0, 0.3))
        while t < 200:
            latency = float(lognormal(rng, 0.2, 0.5, 1)[0]) * (4 if 40 <= t < 160 else 1)
            starts.append(t)
            ends.append(t + latency)
            t += latency + float(lognormal(rng, 0.3, 0.5, 1)[0])
    return calls(np.asarray(starts), np.asarray(ends), ["ok"] * len(starts))


def surge_run(seed: int) -> Calls:
    """5 FIFO servers (mean 0.2 s: 25 calls/s) at 18 calls/s, 30/s in 60..75 s: the queue
    built by the surge is queueing, not a slowdown."""
    rng = np.random.default_rng(seed)
    t, arrive = 0.0, []
    while t < 200:
        t += float(rng.exponential(1 / (30.0 if 60 <= t < 75 else 18.0)))
        arrive.append(t)
    service = lognormal(rng, 0.2, 0.5, len(arrive))
    free = [0.0] * 5
    end = np.empty(len(arrive))
    for i, (a, s) in enumerate(zip(arrive, service, strict=True)):
        end[i] = max(a, heapq.heappop(free)) + s
        heapq.heappush(free, end[i])
    return calls(np.asarray(arrive), end, ["ok"] * len(arrive))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_slowdown_that_crowds_a_pool_is_a_window_not_a_capacity(seed: int) -> None:
    """A first capacity fit on these calls finds a hinge (the slow calls are the crowded
    ones) and called the window's calls queued, so no window was found, and the fitted world
    had 4 to 8 servers and no slowdown (the re-recorded incident: makespan +22 %)."""
    run = pool_capped_run(seed)
    assert fit_capacity(run, np.ones(len(run), bool), "first").servers.identifiable
    fit = fit_provider("partner", run)
    assert fit.capacity.servers.value is None
    [window] = fit.slowdowns
    assert window.factor == pytest.approx(4, rel=0.15)
    assert window.start_s == pytest.approx(40, abs=1.0)
    assert window.end_s == pytest.approx(160, abs=1.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_queue_built_by_a_surge_stays_a_capacity_not_a_window(seed: int) -> None:
    fit = fit_provider("partner", surge_run(seed))
    assert fit.capacity.servers.value == 5
    assert fit.slowdowns == []


def test_a_burst_with_stragglers_is_a_closed_arrival_not_a_division_by_zero() -> None:
    """A busy load test submitted most of a wave at one instant and a few tasks later: the
    fit crashed (ZeroDivisionError) on the segment of zero gaps."""
    times = np.array([5.0] * 174 + [21.0] * 21)
    fitted = fit_arrivals(times, 100.0)
    assert (fitted.kind, fitted.count, fitted.start_s) == ("closed", 195, 5.0)
    segment = fit_arrivals(np.array([0.0, 1.0, 2.0, 3.0] + [4.0] * 40 + [5.0]), 10.0)
    assert segment.kind == "closed"
