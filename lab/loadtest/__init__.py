"""Load tests: a scenario run for real, to hold the simulator to what really happens.

`lab loadtest FILE` replaces each modelled part of a scenario with a real one and runs the
batch on the real runtime (`taskfuse.runtime.Runner`: its worker threads, its task
processes, or its event loop for a kind of `executor: async`, as the scenario says):

* every downstream is an HTTP server on 127.0.0.1 (servers.py, each in a child process of
  its own) that enforces the provider's token bucket, latency, errors, capacity and outages;
* task programs make real HTTP calls (connections.py: blocking keep-alive connections on
  threads, asyncio streams on the event loop) through the runtime's `ctx.downstream(name)`
  guards (client.py: one compiled program, run by a thread or awaited by a coroutine) and
  real queries on real connection pools (pools.py);
* business traffic is a real open-loop load generator on the same pool, behind a gateway
  with a timeout and a circuit breaker (business.py).

`--time-scale F` runs the world F times faster or slower (scale.py); every number in the
report and the trace is converted back to scenario seconds, so it lines up with
`lab simulate` key by key (`lab compare`, compare.py). The harness measures its own share of
every call and timer (harness.py), and the trace records what `lab fit` needs beyond the
runtime's events: DB steps, business requests, the run's limits (record.py).
"""
