"""Prometheus rule files shipped with taskfuse (package data; see `taskfuse.observe.alerts`)."""
