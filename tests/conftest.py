"""Hypothesis profiles: the same commit is green or red for good, and long runs keep what they find.

* ``ci`` (chosen by CI=true, and by ``make test``): derandomized, so the examples are a
  function of the test's code and the same commit runs the same cases every time; no
  example database (hypothesis refuses one with derandomize); blobs printed, so a failure
  can be reproduced with ``@reproduce_failure``.
* ``dev`` (plain ``pytest``): random examples, a failure saved in .hypothesis/ and replayed
  first next time, and the committed failures (EXAMPLES_DIR) replayed as well.
* ``long`` (``make property``): x10 examples, x2 state machine steps, random. New failures
  are saved in EXAMPLES_DIR (commit it); fix each and replay its printed steps as a
  regression test (see tests/core/replay.py), which ``make test`` then runs for good.

``HYPOTHESIS_PROFILE`` names a profile explicitly. Timing never decides a result: no deadline,
and the too_slow health check off, since the machine is shared.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from tests.scale import BASE_EXAMPLES, BASE_STEPS

#: The committed example database: every failing case `make property` has found.
EXAMPLES_DIR = Path(__file__).parent / "hypothesis-examples"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


class KeptFailures(ExampleDatabase):
    """The committed example database: a minimal failing case, once saved, stays.

    Hypothesis drops a saved case as soon as it passes; here it stays, so every long run
    first replays every bug ever found. Only minimal cases are stored: a case replaced by a
    smaller failing one is dropped, and the shrinker's secondary corpus and pareto front
    stay out of the repository.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = DirectoryBasedExampleDatabase(path)

    @staticmethod
    def _primary(key: bytes) -> bool:
        return not key.endswith((b".secondary", b".pareto"))

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.db.fetch(key) if self._primary(key) else ()

    def save(self, key: bytes, value: bytes) -> None:
        if self._primary(key):
            self.db.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        """Passing now is no reason to forget a case that once failed."""

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if self._primary(dest):
            self.db.save(dest, value)
        elif self._primary(src):  # superseded by a smaller failing case
            self.db.delete(src, value)


_QUIET = [HealthCheck.too_slow]
settings.register_profile(
    "ci",
    max_examples=BASE_EXAMPLES,
    stateful_step_count=BASE_STEPS,
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "dev",
    max_examples=BASE_EXAMPLES,
    stateful_step_count=BASE_STEPS,
    database=MultiplexedDatabase(
        DirectoryBasedExampleDatabase(".hypothesis/examples"),
        ReadOnlyDatabase(DirectoryBasedExampleDatabase(EXAMPLES_DIR)),
    ),
    deadline=None,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    "long",
    max_examples=10 * BASE_EXAMPLES,
    stateful_step_count=2 * BASE_STEPS,
    database=KeptFailures(EXAMPLES_DIR),
    print_blob=True,
    deadline=None,
    suppress_health_check=_QUIET,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if IN_CI else "dev"))


def pytest_report_header() -> str:
    return f"hypothesis profile: {settings.get_current_profile_name()}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every hypothesis test `property` (state machines are marked where defined)."""
    for item in items:
        if isinstance(item, pytest.Function) and is_hypothesis_test(item.obj):
            item.add_marker(pytest.mark.property)
