"""Replaying a failing case of a hypothesis state machine as a plain, deterministic test.

Hypothesis prints a failing case as the rules it ran (`state.claim(n=1, worker='w1')`) and,
for rules that draw inside (`st.data()`), the values drawn (`Draw 7: 'w1'`). `Draws` stands
in for that `data` argument and hands out the printed values in order, so the printed case
becomes a regression test that runs exactly the same steps on every run, and `checked` runs
the machine's invariants after each step as hypothesis did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine

#: The attribute hypothesis marks @invariant methods with (checked: a rename fails loudly).
_INVARIANT_MARKER = "hypothesis_stateful_invariant"


class Draws:
    """The values a rule drew, in order. A callable is called at its draw (to name a record
    the machine only holds by then, e.g. `lambda: state.held["w1"][0]`)."""

    def __init__(self, *values: Any) -> None:
        self._values = list(values)

    def draw(self, strategy: Any, label: Any = None) -> Any:
        assert self._values, f"the rule drew more than the case printed (from {strategy!r})"
        value = self._values.pop(0)
        return value() if callable(value) else value


def checked(machine: RuleBasedStateMachine) -> Callable[[Callable[[], Any]], None]:
    """`step(lambda: machine.rule(...))` runs the rule, then every invariant of the machine."""
    invariants = [
        name
        for name in dir(type(machine))
        if getattr(getattr(type(machine), name), _INVARIANT_MARKER, None) is not None
    ]
    assert invariants, "found no @invariant methods: has hypothesis renamed its marker?"

    def step(rule: Callable[[], Any]) -> None:
        rule()
        for name in invariants:
            getattr(machine, name)()

    return step
