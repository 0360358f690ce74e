"""Each model element on its own: pool FIFO and timeout, provider 429s, outages, capacity,
business latency, distributions."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest
import simpy

from lab.model.arrivals import poisson_times
from lab.model.dist import Empirical, Exponential, Integers, Lognormal, Uniform
from lab.model.pool import Pool
from lab.scenario import Pool as PoolSpec

# -- the pool ------------------------------------------------------------------------------


def test_pool_serves_waiters_first_in_first_out_and_times_out() -> None:
    env = simpy.Environment()
    pool = Pool(env, "db", PoolSpec(size=1, acquire_timeout_s=5.0))
    log: list[tuple[str, float, bool]] = []

    def user(name: str, arrive: float, hold: float):
        yield env.timeout(arrive)
        if pool.bulkhead.try_acquire_nowait():
            granted = True
        else:
            granted = yield pool.wait_event(env.now)
        log.append((name, env.now, granted))
        if granted:
            yield env.timeout(hold)
            pool.release()

    for name, arrive, hold in [("a", 0, 3), ("b", 1, 3), ("c", 2, 3), ("d", 2.5, 1)]:
        env.process(user(name, arrive, hold))
    env.run()
    # a holds 0-3, b waits 1->3 and holds to 6, c waits 2->6 (4 s < 5 s); d would get it at
    # 9 but gives up at 2.5 + 5 = 7.5
    assert log == [("a", 0, True), ("b", 3, True), ("c", 6, True), ("d", 7.5, False)]
    assert pool.timeouts == 1 and pool.in_use == 0 and pool.waiting == 0
    assert pool.waits == [2.0, 4.0]  # granted waits; immediate grants are counted by callers


# -- providers, through whole runs ---------------------------------------------------------

ONE_CALL = """
workers: unbounded
retry: {{max_retry: 0}}
downstreams:
  api:
    provider: {provider}
    client: {client}
batches:
  - id: b
    count: {count}
    program:
      - call: {{downstream: api}}
"""


def test_provider_token_bucket_answers_429_beyond_its_burst(sim) -> None:
    r = sim(ONE_CALL.format(provider="{rate: 10, burst: 5, latency: 0.05}", client="{}",
                            count=50)).report
    api = r["downstreams"]["api"]
    assert (api["ok"], api["rejected_429"]) == (5, 45)  # all 50 arrive at t=0
    assert r["tasks"]["SUCCESS"] == 5 and r["tasks"]["FAILED"] == 45


def test_outage_error_and_hang_modes(sim) -> None:
    err = "{latency: 0.05, outages: [{start_s: 0, end_s: 10, mode: error, error: http_503}]}"
    r = sim(ONE_CALL.format(provider=err, client="{}", count=20)).report
    assert r["downstreams"]["api"]["errors"] == 20 and r["tasks"]["FAILED"] == 20
    hang = "{latency: 0.05, outages: [{start_s: 0, end_s: 10, mode: hang}]}"
    r = sim(ONE_CALL.format(provider=hang, client="{timeout_s: 0.5}", count=20)).report
    assert r["downstreams"]["api"]["timeouts"] == 20
    assert r["makespan_s"] == pytest.approx(0.5)
    r = sim(ONE_CALL.format(provider=hang, client="{}", count=20)).report
    assert r["downstreams"]["api"]["errors"] == 20 and r["makespan_s"] == pytest.approx(10.0)


def test_retries_recover_after_an_outage(sim) -> None:
    provider = "{latency: 0.05, outages: [{start_s: 0, end_s: 1, mode: error}]}"
    client = "{retry: {max_retry: 5, backoff: {kind: fixed, base: 0.4, jitter: none}}}"
    r = sim(ONE_CALL.format(provider=provider, client=client, count=10)).report
    api = r["downstreams"]["api"]
    assert r["tasks"]["SUCCESS"] == 10
    assert api["errors"] == 30 and api["call_retries"] == 30  # fail at 0, 0.4, 0.8; ok at 1.2


def test_capacity_makes_latency_grow_with_load_and_serves_abandoned_work(sim) -> None:
    provider = "{capacity: {servers: 2, service: 1.0}}"
    r = sim(ONE_CALL.format(provider=provider, client="{}", count=6)).report
    assert r["makespan_s"] == pytest.approx(3.0)  # 6 jobs, 2 servers, 1 s each
    r = sim(ONE_CALL.format(provider=provider, client="{timeout_s: 1.5}", count=6)).report
    api = r["downstreams"]["api"]
    assert (api["ok"], api["timeouts"], api["provider_abandoned"]) == (2, 4, 4)


def test_slowdown_multiplies_service_time(sim) -> None:
    provider = "{latency: 1.0, slowdowns: [{start_s: 0, end_s: 5, factor: 3}]}"
    r = sim(ONE_CALL.format(provider=provider, client="{}", count=3)).report
    assert r["makespan_s"] == pytest.approx(3.0)


def test_business_latency_without_contention_is_the_query_time(sim) -> None:
    r = sim("""
    seed: 5
    horizon_s: 300
    pools: {db: {size: 50}}
    business: {pool: db, rate: 20, query: {dist: lognormal, mean: 0.02, cv: 0.5}}
    batches:
      - id: b
        count: 1
        arrival: {kind: closed, start_s: 299}
        program: [{work: 0.5}]
    """).report
    b = r["business"]
    sigma2 = math.log1p(0.25)
    median = 0.02 * math.exp(-sigma2 / 2)
    assert b["requests"] == pytest.approx(20 * 299.5, rel=0.05)
    assert b["p50_s"] == pytest.approx(median, rel=0.05)
    assert b["timeouts"] == 0 and r["pools"]["db"]["wait_p99_s"] == 0.0


def test_business_follows_its_schedule_on_the_shared_poisson_clock(sim) -> None:
    """The simulated business traffic arrives at `poisson_times` of its stream (the load
    test's arrival thread reads the same clock): 20/s, none at all for 10 s, then 5/s."""
    r = sim("""
    seed: 4
    horizon_s: 40
    pools: {db: {size: 50}}
    business:
      pool: db
      rate: 20
      query: 0.001
      schedule: [{at_s: 10, rate: 0}, {at_s: 20, rate: 5}]
    batches:
      - id: b
        count: 1
        arrival: {kind: closed, start_s: 39.9}
        program: [{work: 0.05}]
    """)
    times = poisson_times(20, [(10, 0), (20, 5)], random.Random("4:business"))
    expected = list(itertools.takewhile(lambda t: t < 39.95, times))
    assert r.report["business"]["requests"] == len(expected)
    assert sum(t < 10 for t in expected) == pytest.approx(200, rel=0.2)
    assert not any(10 <= t < 20 for t in expected)
    assert sum(t >= 20 for t in expected) == pytest.approx(100, rel=0.3)


def test_business_waits_behind_a_full_pool_and_the_gateway_gives_up(sim) -> None:
    r = sim("""
    horizon_s: 60
    workers: 2
    pools: {db: {size: 2, acquire_timeout_s: 30}}
    business:
      pool: db
      rate: 5
      query: 0.01
      gateway_timeout_s: 2
      breaker: {failure_rate: 0.5, window: count, window_size: 10, minimum_calls: 5}
    batches:
      - id: hog
        count: 2
        program: [{db: {pool: db, query: 20, hold: whole_task}}]
    """).report
    b = r["business"]
    assert b["timeouts"] > 0 and b["p99_s"] == 2.0
    assert b["breaker_opens"] >= 1 and b["rejected_by_breaker"] > 0


# -- distributions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dist",
    [
        Uniform(dist="uniform", low=1, high=3),
        Exponential(dist="exponential", mean=0.5),
        Lognormal(dist="lognormal", mean=0.2, cv=1.5),
        Integers(dist="integers", low=1, high=3),
        Empirical(dist="empirical", values=[1, 2, 2, 10]),
        Empirical(dist="empirical", percentiles={0: 0.1, 50: 0.2, 90: 0.5, 100: 2.0}),
    ],
    ids=lambda d: d.dist,
)
def test_sampler_means_match_the_spec(dist) -> None:
    draw = dist.sampler(random.Random(42))
    samples = [draw() for _ in range(60_000)]
    assert statistics.fmean(samples) == pytest.approx(dist.mean, rel=0.03)
    assert min(samples) >= 0


def test_empirical_percentiles_are_honoured() -> None:
    d = Empirical(dist="empirical", percentiles={0: 0.0, 50: 1.0, 99: 5.0, 100: 6.0})
    draw = d.sampler(random.Random(1))
    xs = sorted(draw() for _ in range(50_000))
    assert xs[len(xs) // 2] == pytest.approx(1.0, rel=0.03)
    assert xs[int(len(xs) * 0.99)] == pytest.approx(5.0, rel=0.03)


def test_same_seed_same_draws() -> None:
    d = Lognormal(dist="lognormal", mean=1, cv=0.5)
    a, b = d.sampler(random.Random(3)), d.sampler(random.Random(3))
    assert [a() for _ in range(100)] == [b() for _ in range(100)]
