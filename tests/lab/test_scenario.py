"""Scenario files: every shipped one validates; bad input is one clear line with its line."""

from __future__ import annotations

import json
import textwrap

import pytest

from lab.cli import main
from lab.scenario import ScenarioError, json_schema, load_scenario, parse_scenario

from .conftest import SCENARIOS

GOOD = """\
pools:
  db: {size: 2}
downstreams:
  api:
    provider: {rate: 10, latency: {dist: lognormal, mean: 0.1, cv: 0.5}}
batches:
  - id: a
    count: 3
    program:
      - db: {pool: db, query: 0.01}
      - call: {downstream: api}
"""


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_scenario_validates(path) -> None:
    scenario = load_scenario(path)
    assert scenario.batches and scenario.name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("workers: -3\n" + GOOD,
         "<t>:1: workers: input should be greater than or equal to 1, got -3"),
        ("bogus: 1\n" + GOOD, "<t>:1: bogus: unknown key"),
        (GOOD.replace("size: 2", "size: 0"),
         "<t>:2: pools.db.size: input should be greater than or equal to 1, got 0"),
        (GOOD.replace("rate: 10", "rate: -5"),
         "<t>:5: downstreams.api.provider.rate: input should be greater than or equal to "
         "0.000001, got -5"),
        ("seed: abc\n" + GOOD, "<t>:1: seed: input should be a valid integer"),
        (GOOD.replace("count: 3", "count: many"), "<t>:8: batches[0].count: input should be"),
    ],
)
def test_bad_values_name_line_path_and_expectation(text: str, expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, "<t>")
    assert str(info.value).startswith(expected), str(info.value)


def test_negative_cv_points_at_the_nested_key() -> None:
    text = GOOD.replace("cv: 0.5", "cv: -1")
    with pytest.raises(ScenarioError, match=r"^<t>:5: downstreams\.api\.provider\.latency\.cv: "
                                            r"input should be greater than or equal to 0"):
        parse_scenario(text, "<t>")


def test_unknown_step_and_unknown_reference() -> None:
    with pytest.raises(ScenarioError, match=r"<t>:10: batches\[0\]\.program\[0\]: a step is one"):
        parse_scenario(GOOD.replace("- db: {pool: db, query: 0.01}", "- sleep: 1"), "<t>")
    with pytest.raises(ScenarioError, match=r"<t>:11: batches\[0\]\.program\[1\]\.call\."
                                            r"downstream: 'nope' is not one of"):
        parse_scenario(GOOD.replace("downstream: api}", "downstream: nope}"), "<t>")


def test_overrides_are_validated_like_the_file() -> None:
    s = parse_scenario(GOOD, "<t>", ["batches.a.count=7", "pools.db.size=5", "workers=unbounded"])
    assert (s.batches[0].count, s.pools["db"].size, s.workers) == (7, 5, "unbounded")
    with pytest.raises(ScenarioError, match=r"pools\.db\.size: input should be greater"):
        parse_scenario(GOOD, "<t>", ["pools.db.size=0"])
    with pytest.raises(ScenarioError, match=r"batches\.zzz: no list item 'zzz'"):
        parse_scenario(GOOD, "<t>", ["batches.zzz.count=1"])
    with pytest.raises(ScenarioError, match=r"expected key\.path=value"):
        parse_scenario(GOOD, "<t>", ["workers"])


def test_yaml_syntax_error_has_a_line() -> None:
    with pytest.raises(ScenarioError, match=r"^<t>:3: not valid YAML"):
        parse_scenario("a: 1\nb: [1, 2\n", "<t>")


def test_schema_is_json_and_covers_the_format(capsys) -> None:
    schema = json.loads(json_schema())
    assert {"batches", "downstreams", "pools", "business", "slo"} <= set(schema["properties"])
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(GOOD) + "surprise: true\n")
    assert main(["simulate", str(bad), "--no-trace"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{bad}:12: surprise: unknown key" in err
    assert main(["simulate", str(tmp_path / "missing.yaml")]) == 2
    assert "no such scenario file" in capsys.readouterr().err
    assert main(["simulate", str(bad.with_name("x.yaml")), "--set", "a"]) == 2


def _fields(model, seen=None):
    """Every (model name, key) of the scenario format, recursively."""
    import typing

    from pydantic import BaseModel

    seen = seen if seen is not None else set()
    out = []
    for name, field in model.model_fields.items():
        out.append((model.__name__, field.alias or name))
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            stack += list(typing.get_args(t))
            if isinstance(t, type) and issubclass(t, BaseModel) and t.__name__ not in seen:
                seen.add(t.__name__)
                out += _fields(t, seen)
    return out


def test_every_key_of_the_format_is_documented() -> None:
    import re

    from lab.scenario import Scenario

    doc = (SCENARIOS / "README.md").read_text()
    missing = sorted({
        f"{model}.{key}" for model, key in _fields(Scenario)
        if not re.search(rf"[`.{{]{re.escape(key)}[`\]\s:,.]", doc)
    })
    assert not missing, f"undocumented scenario keys: {missing}"
