"""Limits files: strict like scenarios, joined to a scenario's world, written back whole."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from lab.cli import main as lab_main
from lab.scenario import ScenarioError, load_scenario, parse_scenario, self_contained
from taskfuse.configfile import ConfigError
from taskfuse.limits.files import dump_limits, load_limits, parse_limits, write_limits
from taskfuse.limits.schema import Limits

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "scenarios" / "limits"

WORLD = """\
name: w
pools:
  db: {size: 2}
downstreams:
  api:
    provider: {rate: 10, latency: 0.05}
    client: {bulkhead: 3}
batches:
  - id: a
    count: 4
    program:
      - db: {pool: db, query: 0.01}
      - call: {downstream: api}
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("path", sorted(LIMITS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_limits_file_validates(path: Path) -> None:
    assert isinstance(load_limits(path), Limits)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("workers: 0\n", "<l>:1: workers: input should be greater than or equal to 1, got 0"),
        ("wokers: 3\n", "<l>:1: wokers: unknown key (not part of the limits format"),
        ("downstreams:\n  p:\n    client: {bulkhead: 0}\n",
         "<l>:3: downstreams.p.client.bulkhead: input should be greater than or equal to 1"),
        ("downstreams:\n  p:\n    provider: {rate: 3}\n",
         "<l>:3: downstreams.p.provider: unknown key"),
        ("retry: {budget: {kind: tokens, cost: 0}}\n",
         "<l>:1: retry.budget.cost: input should be greater than or equal to 0.000001"),
        ("sweeper: {lease_s: 3, heartbeat_s: 5}\n",
         "<l>:1: sweeper: heartbeat_s must be < lease_s"),
        ("batches: [{id: a}, {id: a}]\n", "<l>:1: batches: batch id 'a' is listed twice"),
        ("max_result_bytes: 0\n",
         "<l>:1: max_result_bytes: input should be greater than or equal to 1, got 0"),
    ],
)
def test_a_bad_limits_file_is_one_line_with_file_line_and_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_limits(text, "<l>")
    assert str(info.value).startswith(expected), str(info.value)


def test_a_scenario_takes_its_limits_from_the_file_it_names(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "workers: 3\ndownstreams:\n  api:\n    client: {bulkhead: 7}\n")
    world = WORLD.replace("    client: {bulkhead: 3}\n", "")
    scenario = parse_scenario("limits: l.yaml\n" + world, str(tmp_path / "s.yaml"))
    assert scenario.workers == 3
    assert scenario.downstreams["api"].client.bulkhead == 7
    assert scenario.limits_source == str(tmp_path / "l.yaml")
    assert scenario.limits().downstreams["api"].client.bulkhead == 7


def test_a_key_in_both_places_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "downstreams:\n  api:\n    client: {bulkhead: 7}\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:\d+: downstreams\.api\.client\.bulkhead: "
                                            r"set both here and in the limits file"):
        parse_scenario("limits: l.yaml\n" + WORLD, str(tmp_path / "s.yaml"))


def test_a_batch_the_world_does_not_have_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "batches: [{id: nope, cap: 2}]\n")
    with pytest.raises(ScenarioError, match=r"batch 'nope' is not one of the scenario's "
                                            r"batches \['a'\]"):
        parse_scenario("limits: l.yaml\n" + WORLD, str(tmp_path / "s.yaml"))


def test_batch_limits_join_by_id(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "batches: [{id: a, cap: 2, priority: 5}]\n")
    scenario = parse_scenario("limits: l.yaml\n" + WORLD, str(tmp_path / "s.yaml"))
    assert (scenario.batches[0].cap, scenario.batches[0].priority) == (2, 5)
    assert scenario.batches[0].count == 4  # the world's part stays


def test_errors_in_the_limits_file_point_into_it(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "workers: 3\npools:\n  db: {size: -1}\n")
    with pytest.raises(ScenarioError, match=r"l\.yaml:3: pools\.db\.size: "):
        parse_scenario("limits: l.yaml\n" + WORLD, str(tmp_path / "s.yaml"))


def test_a_missing_limits_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"no such limits file"):
        parse_scenario("limits: gone.yaml\n" + WORLD, str(tmp_path / "s.yaml"))
    with pytest.raises(ScenarioError, match=r"limits: expected the path of a limits file"):
        parse_scenario("limits: 3\n" + WORLD, str(tmp_path / "s.yaml"))


def test_dash_dash_limits_replaces_every_inline_limit(tmp_path: Path) -> None:
    limits = _write(tmp_path / "l.yaml", "workers: 2\npools:\n  db: {size: 9}\n")
    text = "workers: 50\nretry: {max_retry: 9}\n" + WORLD
    scenario = parse_scenario(text, "<s>", limits=limits)
    assert scenario.workers == 2
    assert scenario.retry.max_retry == Limits().retry.max_retry  # inline value gone
    assert scenario.pools["db"].size == 9
    assert scenario.downstreams["api"].client.bulkhead is None  # the file has no client
    assert scenario.downstreams["api"].provider.rate == 10  # the world stays


def test_a_downstream_the_world_lacks_is_refused(tmp_path: Path) -> None:
    limits = _write(tmp_path / "l.yaml", "pools: {db: {size: 1}}\n"
                    "downstreams:\n  ghost:\n    client: {bulkhead: 1}\n")
    with pytest.raises(ScenarioError, match=r"downstreams\.ghost\.provider: required key"):
        parse_scenario(WORLD, "<s>", limits=limits)


def test_self_contained_text_needs_no_other_file(tmp_path: Path) -> None:
    _write(tmp_path / "l.yaml", "workers: 3\n")
    source = str(tmp_path / "s.yaml")
    text = self_contained("limits: l.yaml\n" + WORLD, source)
    (tmp_path / "l.yaml").unlink()
    assert parse_scenario(text, "<moved>").workers == 3
    assert self_contained(WORLD, "<s>") == WORLD


def test_written_limits_read_back_equal_and_keep_their_header(tmp_path: Path) -> None:
    shipped = load_scenario(ROOT / "scenarios" / "incident-fixed.yaml").limits()
    path = tmp_path / "out.yaml"
    write_limits(shipped, path, "sized by a test\nsecond line")
    text = path.read_text()
    assert text.startswith("# sized by a test\n# second line\n")
    assert load_limits(path) == shipped
    assert dump_limits(shipped) == dump_limits(load_limits(path))  # stable, byte for byte


def test_writing_into_a_missing_directory_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist"):
        write_limits(Limits(), tmp_path / "no" / "such" / "l.yaml")
    assert not (tmp_path / "no").exists()


def test_lab_runs_a_world_against_a_limits_file(tmp_path: Path, capsys) -> None:
    scenario = ROOT / "scenarios" / "incident.yaml"
    fixed = LIMITS / "incident-fixed.yaml"
    world = _write(tmp_path / "w.yaml", (ROOT / "scenarios" / "incident-fixed.yaml").read_text()
                   .replace("limits: limits/incident-fixed.yaml\n", ""))
    assert lab_main(["simulate", str(world), "--limits", str(fixed), "--no-trace",
                     "--json"]) == 0
    with_file = json.loads(capsys.readouterr().out)
    assert lab_main(["simulate", str(ROOT / "scenarios" / "incident-fixed.yaml"), "--no-trace",
                     "--json"]) == 0
    shipped = json.loads(capsys.readouterr().out)
    with_file.pop("wall_s")
    shipped.pop("wall_s")
    assert with_file == shipped
    # the incident's world with the fix's limits: the batch pool is not in that world's
    # programs, but the workers, bulkhead and bucket are, and the SLO verdict changes
    rc = lab_main(["simulate", str(scenario), "--limits", str(fixed), "--no-trace", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc in (0, 1)
    assert report["downstreams"]["partner"]["max_in_flight"] <= 14


def test_lab_schema_limits_is_the_limits_format(capsys) -> None:
    assert lab_main(["schema", "--limits"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "taskfuse limits file"
    assert "provider" not in json.dumps(schema)
    assert {"workers", "downstreams", "pools", "kinds", "sweeper"} <= set(schema["properties"])
