"""`lab watch` refuses bad input in one line with one prefix (`lab:`) and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.cli import main as lab_main
from tests.tui.tracegen import Incident


@pytest.mark.parametrize("speed", ["-5", "0", "nan", "inf", "1e9", "0.1", "1001"])
def test_a_speed_off_the_ladder_is_one_line_and_exit_2(
        incident: Incident, speed: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_main(["watch", "--speed", speed, str(incident.path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab: --speed ")
    assert "0.25 to 1000" in err


def test_an_empty_file_is_named_so_without_a_bytes_literal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.trace").write_bytes(b"")
    assert lab_main(["watch", str(tmp_path / "empty.trace")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "an empty file" in err and "b'" not in err


def test_the_fleet_view_speaks_with_the_same_prefix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_main(["watch", "--store", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lab: ")
