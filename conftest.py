"""The examples of the docs, the README and the scenario format run as tests, so a page
cannot drift from the code.

Every fenced block in docs/**.md, README.md and scenarios/README.md is one of:

* ```python: run (Sybil), the blocks of a page sharing one namespace, in a scratch folder
  that holds a copy of scenarios/ and examples/;
* ```console: each `$ command` line is run in that folder with the project's commands on
  PATH, and the lines after it are its expected output: compared line by line after
  trailing spaces, with a line `...` standing for any number of lines and `...` inside a
  line for any text. A command that must
  fail says its exit code at the end of the line: `$ lab simulate x.yaml  # exit 1`;
* anything else (yaml, text, sh, mermaid) is shown, not run; an `sh` or `bash` block must be
  preceded by `<!-- skip: next "why it cannot run here" -->` so nothing runnable is left
  unchecked by accident (the test below refuses an unmarked one).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
EXIT = re.compile(r"\s+#\s*exit (\d+)$")


def _setup(namespace: dict[str, Any]) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="docs-"))
    for folder in ("scenarios", "examples"):
        shutil.copytree(ROOT / folder, scratch / folder)
    namespace["_scratch"] = scratch
    namespace["_cwd"] = os.getcwd()
    os.chdir(scratch)


def _teardown(namespace: dict[str, Any]) -> None:
    os.chdir(namespace["_cwd"])
    shutil.rmtree(namespace["_scratch"], ignore_errors=True)


def run_console(example: Example) -> None:
    """Run each `$ ` line of a console block and compare its output with the lines below."""
    for command, code, expected in _commands(example.parsed):
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
               "COLUMNS": "100", "NO_COLOR": "1", "PYTHONPATH": "examples"}
        done = subprocess.run(command, shell=True, cwd=example.namespace["_scratch"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == code, (
            f"`{command}` exited {done.returncode}, the page says {code}:\n{done.stderr}")
        got = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
        assert matches(expected, got), (
            f"`{command}` printed:\n" + "\n".join(got) + "\n\nthe page shows:\n"
            + "\n".join(expected))


def _commands(block: str) -> list[tuple[str, int, list[str]]]:
    out: list[tuple[str, int, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command = line[2:]
            code = 0
            if m := EXIT.search(command):
                code, command = int(m.group(1)), command[: m.start()]
            shlex.split(command)  # a page with an unbalanced quote fails here, clearly
            out.append((command, code, []))
        elif out:
            out[-1][2].append(line.rstrip())
    while out and out[-1][2] and not out[-1][2][-1]:
        out[-1][2].pop()
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """Line by line, where a line `...` matches any run of lines (also none)."""
    if not expected:
        return True  # a command shown without its output: only its exit code is checked
    if expected[0] == "...":
        rest = expected[1:]
        return any(matches(rest, got[i:]) for i in range(len(got) + 1))
    return bool(got) and _line_matches(expected[0], got[0]) and matches(expected[1:], got[1:])


def _line_matches(expected: str, got: str) -> bool:
    """Equal, or equal where the page wrote `...` for a part that varies (a wall time)."""
    if "..." not in expected:
        return expected == got
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, got) is not None


def refuse_unmarked(example: Example) -> None:
    raise AssertionError("a shell block that is not run: write it as a `console` block with "
                         "its output, or mark it <!-- skip: next \"why\" -->")


pytest_collect_file = Sybil(
    parsers=[
        SkipParser(),
        PythonCodeBlockParser(),
        CodeBlockParser("console", run_console),
        CodeBlockParser("sh", refuse_unmarked),
        CodeBlockParser("bash", refuse_unmarked),
    ],
    patterns=["docs/*.md", "docs/*/*.md", "README.md", "scenarios/README.md"],
    excludes=["tests/*.md", "tests/*/*.md"],
    setup=_setup,
    teardown=_teardown,
).pytest()
