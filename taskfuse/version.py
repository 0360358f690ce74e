"""The installed version, as `taskfuse --version` and `lab --version` print it."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version


def version_line(prog: str) -> str:
    """`PROG VERSION (Python X.Y.Z)`: what a bug report needs to say which code ran."""
    try:
        ours = version("taskfuse")
    except PackageNotFoundError:  # run from a source tree that was never installed
        ours = "unknown"
    return f"{prog} {ours} (Python {platform.python_version()})"
