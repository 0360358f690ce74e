"""Hostile scenario files: mutations of the shipped ones never crash `lab simulate`.

Every mutated file (random bytes, deleted or repeated lines, huge numbers, aliases, wrong
types, truncation) and hostile `--set` gets either a run (stopped here, before the
simulation) or one line on stderr and exit 2, within 5 s and 500 MB. The cases of the issue
are pinned below with their messages, and a few run as real processes, measured whole.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.cli import main
from lab.scenario import MAX_TASKS
from taskfuse.configfile import MAX_BYTES, MAX_NODES
from taskfuse.limits.schema import MAX_WORKERS
from tests.hostile import WouldGoOn, answer_of, run_measured
from tests.scale import examples

from .conftest import SCENARIOS

SHIPPED = {p.name: p.read_bytes() for p in sorted(SCENARIOS.glob("*.yaml"))}
NUMBER = re.compile(rb"(?<=: )-?\d+(\.\d+)?\b")
VALUE = re.compile(rb"(?<=: )[^\s{\[][^\n,}]*")
HUGE = [b"1000000000000", b"100000000", b"1e308", b"-1", b".inf", b"-.inf", b".nan", b"0",
        b"1e-300", b"9" * 5000, b"0x7fffffffffffffff", b"1_000_000_000"]
WRONG = [b"[]", b"{}", b"'text'", b"true", b"null", b"[1, [2, [3]]]", b"~", b"2020-01-01",
         b"!!binary aGVsbG8=", b"*undefined", b"&a [*a]", b'"\\0"', b"'a/b'"]


def bomb(levels: int) -> bytes:
    """The billion laughs: each level names the last one ten times."""
    lines = [b"l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [b"l%d: &l%d [" % (i, i) + b", ".join([b"*l%d" % (i - 1)] * 10) + b"]"
              for i in range(1, levels + 1)]
    return b"\n".join(lines) + b"\n"


def _at(draw, data: bytes) -> int:
    return draw(st.integers(0, len(data)))


def _random_bytes(draw, data: bytes) -> bytes:
    at, blob = _at(draw, data), draw(st.binary(min_size=1, max_size=8))
    if draw(st.booleans()):
        return data[:at] + blob + data[at:]
    return data[:at] + blob + data[at + len(blob):]


def _lines(draw, data: bytes, repeat: bool) -> bytes:
    lines = data.split(b"\n")
    i = draw(st.integers(0, len(lines) - 1))
    return b"\n".join(lines[: i + 1] + lines[i:] if repeat else lines[:i] + lines[i + 1:])


def _replace(draw, data: bytes, pattern: re.Pattern[bytes], choices: list[bytes]) -> bytes:
    spots = list(pattern.finditer(data))
    if not spots:
        return data
    spot = draw(st.sampled_from(spots))
    return data[: spot.start()] + draw(st.sampled_from(choices)) + data[spot.end():]


def _aliases(draw, data: bytes) -> bytes:
    return bomb(draw(st.integers(1, 9))) + data


def _truncate(draw, data: bytes) -> bytes:
    return data[: _at(draw, data)]


MUTATIONS = [
    _random_bytes,
    lambda draw, data: _lines(draw, data, repeat=False),
    lambda draw, data: _lines(draw, data, repeat=True),  # often a duplicate key
    lambda draw, data: _replace(draw, data, NUMBER, HUGE),
    lambda draw, data: _replace(draw, data, VALUE, WRONG + HUGE),
    _aliases,
    _truncate,
]
OVERRIDES = st.lists(st.sampled_from([
    "pools.shard.size=5", "workers=100000000", "batches.0.count=1000000000000",
    "horizon_s=.inf", "seed=[1, 2]", "name=../../etc", "sample_interval_s=1e-12",
    "batches.0.program.0=[]", "nope", "=", "downstreams.x.client.bulkhead=0",
    "workers=&a [*a]", "batches.99.count=1", "retry.max_retry=1e400",
]), max_size=2)


@st.composite
def mutated(draw) -> bytes:
    data = SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))]
    for _ in range(draw(st.integers(1, 3))):
        data = draw(st.sampled_from(MUTATIONS))(draw, data)
    return data


def _would_simulate(*args: object, **kwargs: object) -> None:
    raise WouldGoOn


def simulate_answer(data: bytes, overrides: list[str] | None = None):  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr("lab.simulate.run.run_scenario", _would_simulate)  # valid: stop before the run
        path = Path(tmp) / "s.yaml"
        path.write_bytes(data)
        sets = [a for o in overrides or [] for a in ("--set", o)]
        return answer_of(main, ["simulate", str(path), "--no-trace", *sets])


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated(), OVERRIDES)
def test_mutated_scenarios_get_a_run_or_one_line(data: bytes, overrides: list[str]) -> None:
    simulate_answer(data, overrides).hold_to_promises()


INCIDENT = SHIPPED["incident.yaml"]


@pytest.mark.parametrize(("data", "overrides", "expected"), [
    (INCIDENT.replace(b"name: incident", b"name: \xff\xfeincident"), [],
     r"s\.yaml:18: not UTF-8 text \(byte 0xff at offset \d+\)"),
    (INCIDENT.replace(b"name: incident", b"name: in\x00cident"), [],
     r":\d+: a NUL byte at column 9"),
    (bomb(9) + INCIDENT, [], rf"expands to more than {MAX_NODES:,} YAML nodes"),
    (b"a: &a [1, *a]\n" + INCIDENT, [], r":1: a\[1\]: an alias refers to the anchor"),
    (INCIDENT, ["batches.skus.count=100000000"], rf"a run holds at most {MAX_TASKS:,}"),
    (INCIDENT, [f"workers={MAX_WORKERS * 10_000}"],
     rf"workers: input should be less than or equal to {MAX_WORKERS}"),
    (INCIDENT.replace(b"workers: 50", b"workers: 50\nworkers: 10"), [],
     r":\d+: workers: duplicate key \(first at line \d+"),
    (INCIDENT, ["pools.shard.size=5"],
     r"pools\.shard: not used by any batch, child or business traffic \(did you mean "
     r"'shared'\?\)"),
    (b"x" * (MAX_BYTES + 1), [], r"larger than 256 KiB"),
    (INCIDENT, ["horizon_s=.inf"], r"horizon_s: input should be a finite number"),
], ids=["non-utf8", "nul", "alias-bomb", "recursive-alias", "huge-count", "huge-workers",
        "duplicate-key", "unused-pool", "huge-file", "infinite-horizon"])
def test_the_issues_cases_name_what_and_where(data: bytes, overrides: list[str],
                                              expected: str) -> None:
    answer = simulate_answer(data, overrides)
    answer.hold_to_promises()
    assert answer.code == 2 and re.search(expected, answer.err), answer.err


def test_a_bomb_in_a_set_value_is_refused_too() -> None:
    levels = ["&a [1,1,1,1,1,1,1,1,1,1]"] + [
        f"&{c} [" + ", ".join([f"*{p}"] * 10) + "]" for p, c in zip("abcde", "bcdef", strict=True)]
    value = "[" + ", ".join(levels) + "]"
    answer = simulate_answer(INCIDENT, [f"workers={value}"])
    answer.hold_to_promises()
    assert "the value is not valid YAML" in answer.err and "expands to more than" in answer.err


def test_a_sweep_may_add_a_pool_that_only_some_points_use(tmp_path: Path) -> None:
    """The docs' sizing example adds the batch pool with --set and varies which pool the
    batch uses: at the points that keep `shared`, `batch` is unused, and that is fine."""
    from lab.sizing.sweep import Plan

    path = SCENARIOS / "incident.yaml"
    Plan.from_file(path, ["pools.batch.size=20"],
                   ["batches.skus.program.0.db.pool=shared,batch", "workers=5,10"])
    with pytest.raises(Exception, match=r"pools\.shard: not used"):
        Plan.from_file(path, ["pools.shard.size=20"], ["workers=5,10"])


@pytest.mark.parametrize("name", ["bomb", "non-utf8", "huge-count", "big-file"])
def test_real_processes_answer_fast_in_bounded_memory(tmp_path: Path, name: str) -> None:
    """The whole process, measured by the system: peak resident size and time to answer."""
    data = {"bomb": bomb(9) + INCIDENT,
            "non-utf8": INCIDENT + b"\n# \xff\n",
            "huge-count": INCIDENT.replace(b"count: 3000", b"count: 1000000000000"),
            "big-file": b"a: [" + b"1," * (MAX_BYTES // 2 - 8) + b"1]\n"}[name]
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    answer = run_measured("lab.cli", ["simulate", str(path), "--no-trace"], tmp_path)
    answer.hold_to_promises()
    assert answer.code == 2 and answer.err.startswith("lab: "), answer.err
