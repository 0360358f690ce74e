"""An App whose process kind's function lives in a module made at run time (generated code,
a notebook): the worker has it, and no other process can import it."""

from __future__ import annotations

import sys
import types
from typing import Any

from taskfuse.runtime import App

generated = types.ModuleType("taskfuse_generated_tasks")


def noop(ctx: Any, payload: Any) -> None:
    return None


noop.__module__ = generated.__name__
generated.noop = noop  # type: ignore[attr-defined]
sys.modules[generated.__name__] = generated

app = App("unimportable")
app.task("noop", executor="process")(noop)
