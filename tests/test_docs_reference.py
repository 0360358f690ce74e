"""The docs' reference pages are made from the code: every command and every key shows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
import reference  # the MkDocs hook: a file of the docs rather than a package


@pytest.mark.parametrize("prog, subcommands", [
    ("taskfuse", ["worker", "submit", "status", "cancel", "sweep", "inspect"]),
    ("lab", ["simulate", "sweep", "size", "watch", "schema", "fit"]),
])
def test_every_subcommand_has_its_help(prog: str, subcommands: list[str]) -> None:
    page = reference.expand(f"<!-- generated: cli {prog} -->")
    for name in subcommands:
        assert f"### `{prog} {name}`" in page
        assert f"usage: {prog} {name}" in page


def test_every_key_of_both_formats_has_a_row_with_a_meaning() -> None:
    from taskfuse.limits.schema import Limits

    limits = reference.schema_table("limits")
    rows = limits.splitlines()[2:]
    assert {f"`{key}`" for key in Limits.model_fields} <= {r.split(" | ")[0][2:] for r in rows}
    assert all(not r.endswith("|  |") for r in rows), "a key without a meaning"
    scenario = reference.schema_table("scenario")
    assert "| `downstreams.NAME.provider.rate` |" in scenario


def test_a_marker_the_hook_does_not_know_fails_the_build() -> None:
    with pytest.raises(ValueError, match="unknown generated piece 'nope'"):
        reference.expand("<!-- generated: nope -->")
