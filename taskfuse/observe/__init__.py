"""Observability of real runs: Prometheus metrics, alert rules, and trace ids on the wire.

* `taskfuse.observe.prometheus` — a worker's metrics on a registry of its own, served by
  `taskfuse worker --metrics-port P` (queue depth and running come from the store, so every
  worker of a fleet reports the same numbers);
* `rules/taskfuse.rules.yml` — the source's four alerts as Prometheus rules (package data),
  and `taskfuse.observe.alerts`, which evaluates them with the core's AlertEvaluator over a
  recorded run or simulation;
* `taskfuse.observe.traceparent` — the W3C `traceparent` header for a task's outgoing HTTP
  calls (`ctx.http_headers()` in a task function).

This package imports nothing heavy at import time: the runtime imports `traceparent`.
"""
