"""No two modules share a name for different things: every name that recurs in taskfuse, lab
and tui is in the table of docs/development.md, which says why it is one subject, and no
module is named as a package of ours is (as `lab/fit/limits.py` was beside `taskfuse/limits/`).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("taskfuse", "lab", "tui")
#: Each job's commands: the same role in every package that has one.
SAME_ROLE = {"__init__.py", "cli.py"}


def _modules() -> list[Path]:
    return [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]


def recurring_names() -> set[str]:
    counts = Counter(p.name for p in _modules() if p.name not in SAME_ROLE)
    return {name for name, n in counts.items() if n > 1}


def documented_names() -> set[str]:
    text = (ROOT / "docs" / "development.md").read_text()
    return set(re.findall(r"^\| `(\w+\.py)` \|", text, re.MULTILINE))


def test_every_recurring_module_name_is_explained() -> None:
    recurring = recurring_names()
    assert {"business.py", "report.py"} <= recurring  # the walk sees the tree
    assert recurring == documented_names(), (
        "a module name recurs without a reason in docs/development.md (or the table names "
        "one that no longer recurs): rename it to say what it is, or explain it there")


def test_no_module_is_named_like_one_of_our_packages() -> None:
    packages = {p.name for package in PACKAGES for p in (ROOT / package).rglob("*")
                if p.is_dir() and (p / "__init__.py").exists()}
    clashes = sorted(str(p.relative_to(ROOT)) for p in _modules() if p.stem in packages)
    assert clashes == []
