"""`lab size --threads-or-async KIND`: which executor meets the SLOs, and with how many.

The same search (`lab.sizing.size.Search`) twice over one scenario: once with the kind on worker
threads, varying `workers`, once as coroutines on the event loop, varying
`async_concurrency` (and any `kinds.KIND.async_concurrency`); every other `--vary` axis, the
constraints and the objective are shared. Each side gets its own recommendation; the answer
is the side that keeps every constraint, the better objective when both do, and async on an
exact tie: a coroutine waiting on a call costs no thread (a process of a thousand threads
spends its CPU switching between them, where one event loop keeps thousands of calls in
flight).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.scenario import ScenarioError
from lab.sizing import size
from lab.sizing.sweep import Plan, fmt_stat, show_value, summarize

EXECUTORS = ("thread", "async")


def _axis_key(vary: str) -> str:
    return vary.partition("=")[0].strip()


def _async_only(key: str) -> bool:
    return key == "async_concurrency" or (key.startswith("kinds.")
                                          and key.endswith(".async_concurrency"))


def split_vary(vary: Sequence[str]) -> dict[str, list[str]]:
    """The `--vary` axes of each side: `workers` for threads, `async_concurrency` keys for
    async, the rest for both. Each side must vary its own count."""
    sides = {
        "thread": [v for v in vary if not _async_only(_axis_key(v))],
        "async": [v for v in vary if _axis_key(v) != "workers"],
    }
    if not any(_axis_key(v) == "workers" for v in vary):
        raise ScenarioError("--threads-or-async: give --vary workers=... (the thread side)")
    if not any(_async_only(_axis_key(v)) for v in vary):
        raise ScenarioError("--threads-or-async: give --vary async_concurrency=... (the "
                            "async side)")
    return sides


def plans(path: str, kind: str, overrides: Sequence[str], vary: Sequence[str], seeds: int,
          seed: int | None, limits: str | None) -> dict[str, Plan]:
    """One plan per executor: the kind set to it with a fixed override."""
    sides = split_vary(vary)
    out = {}
    for executor in EXECUTORS:
        sets = [*overrides, f"kinds.{kind}.executor={executor}"]
        out[executor] = Plan.from_file(path, sets, sides[executor], seeds, seed, limits)
    if kind not in out["async"].scenario.kinds:
        raise ScenarioError(f"--threads-or-async {kind!r}: not a kind of the scenario")
    return out


@dataclass(frozen=True)
class Choice:
    """Both searches and the answer (None: neither side keeps every constraint)."""

    kind: str
    results: dict[str, size.SizeResult]
    answer: str | None


def choose(kind: str, results: dict[str, size.SizeResult]) -> Choice:
    feasible = [e for e in EXECUTORS if results[e].best.feasible]
    if not feasible:
        return Choice(kind, results, None)
    # best score first; on an exact tie async (listed last in EXECUTORS) wins
    answer = max(feasible, key=lambda e: (results[e].best.score, EXECUTORS.index(e)))
    return Choice(kind, results, answer)


def _counts(result: size.SizeResult) -> str:
    """The recommended values of the side's own axes (workers, async_concurrency...)."""
    plan, best = result.plan, result.best
    return ", ".join(f"{a.key} {show_value(v)}"
                     for a, v in zip(plan.axes, best.point, strict=True))


def _line(executor: str, result: size.SizeResult) -> str:
    goal = result.goal.path
    score = summarize(result.best.reports, [goal])[goal]
    state = "keeps every constraint" if result.best.feasible else "NO point keeps every " \
        "constraint; closest"
    return f"  {executor:<7} {state}: {_counts(result)}; {goal} {fmt_stat(score)}"


def render(choice: Choice, extra: Sequence[str] = ()) -> str:
    """Each side's full `lab size` answer, then the comparison and the answer."""
    parts = []
    for executor in EXECUTORS:
        parts += [f"== kinds.{choice.kind}.executor: {executor} ==",
                  size.render(choice.results[executor], extra)]
    lines = [f"threads or async for kind {choice.kind}:"]
    lines += [_line(e, choice.results[e]) for e in EXECUTORS]
    if choice.answer is None:
        lines.append("answer: neither executor keeps every constraint in these ranges")
    else:
        best = choice.results[choice.answer]
        lines.append(f"answer: executor {choice.answer}, {_counts(best)}")
    return "\n".join(parts) + "\n" + "\n".join(lines) + "\n"


def as_json(choice: Choice, extra: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "kind": choice.kind,
        "answer": choice.answer,
        **{e: size.as_json(choice.results[e], extra) for e in EXECUTORS},
    }
