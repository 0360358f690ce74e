"""No import circle anywhere in taskfuse/, lab/ and tui/: their modules form a graph with a bottom.

Every import of one of our modules by another counts, at module level or inside a function
(a lazy import is a circle put off, not removed); only imports under `if TYPE_CHECKING:`
(annotations, never run) are left out. `from P import n` is an edge to the module P.n when
there is one, else to P (its `__init__`). The circle, if any, is named in the failure.
tests/runtime/test_import_cycles.py holds the runtime's own layering on the same graph.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("taskfuse", "lab", "tui")


def module_files() -> dict[str, Path]:
    """Every module of our packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Our modules imported by the module `name`, outside `if TYPE_CHECKING:` blocks."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package `level - 1` above this one
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    found.add(f"{source}.{alias.name}")
                elif source in modules:
                    found.add(source)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        stack.extend(ast.iter_child_nodes(node))
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    """{module: the modules of ours it imports}, for every module of taskfuse, lab and tui."""
    files = module_files()
    modules = set(files)
    return {name: _imports(name, path, modules) for name, path in files.items()}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_no_package_has_an_import_circle() -> None:
    graph = import_graph()
    # the walk sees every kind of import: absolute, lazy (inside a function) and relative
    assert {"taskfuse.runtime.aio", "taskfuse.runtime.claimer"} <= graph["taskfuse.runtime.threads"]
    assert "lab.loadtest.runner" in graph["lab.loadtest.cli"]
    assert {"lab", "tui", "taskfuse"} <= {name.split(".")[0] for name in graph}
    circle = _circle(graph)
    assert circle is None, f"import circle: {' -> '.join(circle or [])}"


def test_a_lazy_import_back_is_a_circle() -> None:
    graph = import_graph()
    graph["lab.model.dist"] = graph["lab.model.dist"] | {"lab.simulate.sim"}
    circle = _circle(graph)
    assert circle is not None and {"lab.model.dist", "lab.simulate.sim"} <= set(circle)


def test_a_relative_import_is_resolved(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "sub" / "a.py").write_text(
        "from . import b\nfrom ..c import x\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import d\n")
    modules = {"pkg", "pkg.sub", "pkg.sub.a", "pkg.sub.b", "pkg.c", "pkg.d"}
    assert _imports("pkg.sub.a", pkg / "sub" / "a.py", modules) == {"pkg.sub.b", "pkg.c"}
