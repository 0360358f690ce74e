"""Who owns what in logging: the library touches only the ``taskfuse`` logger; the command
owns its process while it runs (root handler, warnings, thread hooks) and gives it all back."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import warnings

from taskfuse.cli import main
from taskfuse.runtime import logs

SECRET = "postgresql://bob:Hunter2Hunter2@db/app"


def _hooks() -> tuple[object, ...]:
    root = logging.getLogger()
    return (tuple(root.handlers), root.level, threading.excepthook, sys.unraisablehook,
            warnings.showwarning, logging.getLogger("taskfuse").level)


def test_the_library_configures_only_its_own_logger() -> None:
    before = _hooks()[:-1]
    handler = logs.configure(logging.INFO, True, io.StringIO())
    try:
        assert _hooks()[:-1] == before  # root, hooks and warnings: the embedding program's
        assert handler in logging.getLogger("taskfuse").handlers
    finally:
        logging.getLogger("taskfuse").removeHandler(handler)


def test_the_command_owns_the_process_while_it_runs_and_gives_it_back() -> None:
    before = _hooks()
    stream = io.StringIO()
    with logs.process_logging(logging.INFO, True, stream):
        assert _hooks() != before
        logging.getLogger("some.library").info("not shown: libraries log warnings and up")
        logging.getLogger("some.library").warning("shown, %s", SECRET)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("a warning\nover two lines", UserWarning, stacklevel=1)
        thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
        thread.start()
        thread.join()
        assert json.loads(logs.line(logging.WARNING, "from a signal handler"))["level"] == \
            "WARNING"
    assert _hooks() == before
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("some.library", "WARNING"), ("py.warnings", "WARNING"), ("threading", "ERROR")]
    assert "Hunter2" not in stream.getvalue() and "bob:***@db" in records[0]["msg"]
    assert "ZeroDivisionError" in records[2]["error"]
    assert logs.line(logging.WARNING, "plain again") == "plain again"


def test_text_lines_start_with_their_time_and_only_a_traceback_continues_them() -> None:
    stream = io.StringIO()
    with logs.process_logging(logging.INFO, False, stream):
        log = logging.getLogger("taskfuse.test")
        log.warning("first line\n\tsecond line")
        try:
            raise ValueError(f"bad {SECRET}")
        except ValueError:
            log.exception("with a traceback")
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("WARNING taskfuse.test first line | second line")
    assert "ERROR taskfuse.test with a traceback" in lines[1]
    assert lines[2:] and all(line.startswith("    ") for line in lines[2:])
    assert lines[-1] == "    ValueError: bad postgresql://bob:***@db/app"


def test_a_worker_that_cannot_start_says_so_in_one_json_line(capsys) -> None:
    code = main(["worker", "--store", "nosuch://bob:Hunter2Hunter2@db/app", "--app",
                 "tests.runtime.sample_app:app", "--log-json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    record = json.loads(err)
    assert record["level"] == "ERROR" and "unknown store URL scheme" in record["msg"]
    assert "Hunter2" not in err


def test_printed_lines_are_records_of_the_task_that_printed_them() -> None:
    """Two threads print halves of lines in turn: each line is whole, under its own task's
    logger; a line printed outside a task is a record of taskfuse.print; stdout comes back."""
    stream = io.StringIO()
    stdout = sys.stdout
    first_half, second_half = threading.Barrier(2), threading.Barrier(2)

    def task(name: str) -> None:
        class Ctx:
            logger = logging.LoggerAdapter(logging.getLogger(f"taskfuse.task.{name}"),
                                           {"task_id": name})

        with logs.TaskOutput(Ctx()):
            print(f"{name} starts ", end="")
            first_half.wait()
            print(f"and {name} ends")
            second_half.wait()
            print(f"{name} leaves no newline", end="")

    with logs.process_logging(logging.INFO, True, stream, capture_stdout=True):
        assert isinstance(sys.stdout, logs.PrintedLines)
        assert sys.stdout.encoding and sys.stdout.buffer is stdout.buffer  # as code expects
        threads = [threading.Thread(target=task, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("outside any task")
    assert sys.stdout is stdout
    got = {(r.get("task_id"), r["logger"], r["msg"])
           for r in map(json.loads, stream.getvalue().splitlines())}
    for n in ("a", "b"):
        assert (n, f"taskfuse.task.{n}", f"{n} starts and {n} ends") in got
        assert (n, f"taskfuse.task.{n}", f"{n} leaves no newline") in got
    assert (None, "taskfuse.print", "outside any task") in got
