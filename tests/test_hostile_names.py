"""Names reach logs and tables one way, escaped (issue 27, item 6).

A kind with a newline forged a whole line of a worker's text log (its logger is named by the
kind); a batch id forged a row of `taskfuse status`; terminal escape sequences reached the
terminal. `taskfuse.textable.shown` escapes control characters wherever a name is printed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from taskfuse.cli import main
from taskfuse.runtime.logs import TextFormatter
from taskfuse.textable import columns, shown

FORGED_LINE = "2026-12-01 00:00:00,000 INFO taskfuse.runtime all fine"
KIND = f"echo\n{FORGED_LINE}\x1b[2J\x1b]0;title\x07\u202e"
BATCH = "b1\nFORGED  ALL_SUCCESS  -  1  0  0  1"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _inert(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text


def test_a_kind_cannot_forge_a_log_line() -> None:
    record = logging.LogRecord(f"taskfuse.task.{KIND}", logging.WARNING, __file__, 1,
                               "attempt of %s failed\r\n%s", (KIND, FORGED_LINE), None)
    record.trace_id, record.task_id = "t\n1", "id\x1b[1m"
    line = TextFormatter().format(record)
    assert "\n" not in line and "\r" not in line
    _inert(line)
    assert f"taskfuse.task.echo\\n{FORGED_LINE}\\x1b[2J" in line  # still readable


def test_a_traceback_line_holds_no_control_character() -> None:
    try:
        raise ValueError(f"bad kind {KIND}")
    except ValueError:
        import sys

        record = logging.LogRecord("taskfuse", logging.ERROR, __file__, 1, "failed", None,
                                   sys.exc_info())
    text = TextFormatter().format(record)
    _inert(text)
    assert not [ln for ln in text.splitlines()[1:] if not ln.startswith("    ")], text


def test_a_batch_id_cannot_forge_a_status_row(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    code, out, _ = run(capsys, "submit", "--store", db, KIND, "--batch", BATCH)
    assert code == 0 and out.count("\n") == 1
    _inert(out)
    code, out, _ = run(capsys, "status", "--store", db)
    assert code == 0
    rows = out.splitlines()
    assert len(rows) == 3 and rows[1].startswith("b1\\nFORGED") and "FAILED" not in rows[1]
    assert rows[2].startswith("(all tasks)")
    code, out, _ = run(capsys, "cancel", "--store", db, BATCH)
    assert code == 0 and out.count("\n") == 1


def test_a_cell_is_text_not_markup() -> None:
    assert columns(["A"], [["[bold red]x[/]"]])[1] == "[bold red]x[/]"
    assert shown("plain name") == "plain name"
    assert shown("a\tb\x00c\x9bd") == "a\\tb\\x00c\\x9bd"
