"""How many examples and steps a property test runs, relative to the active hypothesis profile.

A test states what it runs under `make test` (`examples(150)`, `steps(40)`); the profile
chosen in tests/conftest.py scales that: x1 for `make test` and CI, x10 examples and x2 steps
for `make property`. Called when a test module is imported, after conftest loaded the profile.
"""

from __future__ import annotations

from hypothesis import settings

#: The max_examples and stateful_step_count of the profiles `make test` runs (scale 1).
BASE_EXAMPLES = 100
BASE_STEPS = 50


def examples(n: int) -> int:
    """`n` examples under `make test`, scaled by the active profile."""
    return max(1, n * settings().max_examples // BASE_EXAMPLES)


def steps(n: int) -> int:
    """`n` steps of a state machine under `make test`, scaled by the active profile."""
    return max(1, n * settings().stateful_step_count // BASE_STEPS)
