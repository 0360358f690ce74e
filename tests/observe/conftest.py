"""Helpers of the observability tests: scrape an endpoint, wait for a condition."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.conftest import make_runner  # noqa: F401  (the fixture, shared)

#: Generous bound for waits: tests assert values, and only fail on this if something hangs.
WAIT_S = 20.0

Labels = frozenset[tuple[str, str]]


class Scrape:
    """One scrape of a /metrics page: sample values by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples[(s.name, frozenset(s.labels.items()))] = s.value

    def value(self, name: str, **labels: str) -> float:
        """The sample with exactly these labels; KeyError names what the page had."""
        key = (name, frozenset(labels.items()))
        if key not in self.samples:
            have = sorted(str(dict(k[1])) for k in self.samples if k[0] == name)
            raise KeyError(f"no {name}{labels} in the scrape; it has {have}")
        return self.samples[key]

    def get(self, name: str, default: float | None = None, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())), default)

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def scrape(url: str) -> Scrape:
    """GET the page with urllib, as Prometheus would (text exposition format)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return Scrape(response.read().decode())


def wait_for(check: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll `check` until it holds; fail naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)
