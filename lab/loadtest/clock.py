"""Two units of time in one run: real seconds (what threads wait) and scenario seconds.

Everything that waits uses the time-scaled scenario, in real seconds. Everything that is
measured is converted to scenario seconds on the way in (`now`, `scenario`), so counters,
the report and the trace line up with a simulation of the unscaled file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Clock:
    """The run's time zero and its scale F (real = scenario x F)."""

    scale: float = 1.0
    t0_mono: float = field(default_factory=time.monotonic)
    t0_wall: float = field(default_factory=time.time)

    def restart(self) -> None:
        """Make now the run's time zero."""
        self.t0_mono = time.monotonic()
        self.t0_wall = time.time()

    def elapsed(self) -> float:
        """Real seconds since the start."""
        return time.monotonic() - self.t0_mono

    def now(self) -> float:
        """Scenario seconds since the start."""
        return (time.monotonic() - self.t0_mono) / self.scale

    def scenario(self, real_seconds: float) -> float:
        """A real duration in scenario seconds."""
        return real_seconds / self.scale

    def real(self, scenario_seconds: float) -> float:
        """A scenario duration in real seconds."""
        return scenario_seconds * self.scale

    def from_wall(self, t_wall: float) -> float:
        """A wall-clock time (the runtime's `now`) in scenario seconds since the start."""
        return (t_wall - self.t0_wall) / self.scale

    def to_wall(self, t_scenario: float) -> float:
        """Scenario seconds since the start as a wall-clock time (to ask the runtime's fuses)."""
        return self.t0_wall + t_scenario * self.scale
