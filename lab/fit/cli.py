"""`lab fit`: its parser and its handler (the fitted scenario and its limits file)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from lab.scenario import ScenarioError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fit", help="learn the world from a recorded run and write a scenario")
    p.set_defaults(handler=fit_cmd)
    p.add_argument("trace", help="a trace of a real run (lab loadtest, taskfuse worker --trace)")
    p.add_argument("--out", metavar="FILE.yaml", default=None,
                   help="write the fitted scenario here: the world, naming a limits file "
                        "beside it that holds the limits the run used")
    p.add_argument("--limits-out", metavar="FILE", default=None,
                   help="the limits file to write (default: FILE.limits.yaml beside --out); "
                        "deployable with `taskfuse worker --limits FILE`")
    p.add_argument("--inline-limits", action="store_true",
                   help="write the limits inside the scenario instead, as one file")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")


def fit_cmd(args: argparse.Namespace) -> int:
    from lab.fit.fitting import fit_trace, fitted_files, fitted_scenario
    from lab.fit.report import as_json, render
    from lab.fit.writer import write_text
    from taskfuse.trace import TraceError

    out = Path(args.out) if args.out is not None else None
    limits_out = _fit_limits_out(args, out)
    try:
        fit = fit_trace(args.trace)
    except TraceError as exc:
        raise ScenarioError(str(exc)) from None
    writes: list[tuple[Path, str, str]] = []
    if limits_out is not None:
        base = out.parent if out is not None else limits_out.parent
        ref = os.path.relpath(limits_out.resolve(), base.resolve())
        text, limits_text = fitted_files(fit, Path(ref).as_posix())
        writes.append((limits_out, limits_text, "limits file"))
    elif out is not None:
        text = fitted_scenario(fit)
    if out is not None:
        writes.append((out, text, "scenario"))
    for path, content, what in writes:  # the limits first: the scenario names them
        try:
            write_text(path, content)
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot write the {what}: "
                                f"{exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(as_json(fit, args.out, str(limits_out) if limits_out else None),
                         indent=2))
    else:
        sys.stdout.write(render(fit))
        if out is None and limits_out is None:
            print("(give --out FILE.yaml to write the fitted scenario and its limits file)")
        for path, _, what in writes:
            print(f"{what} written to {path}")
    return 0


def _fit_limits_out(args: argparse.Namespace, out: Path | None) -> Path | None:
    """Where `lab fit` writes the limits file: --limits-out, else beside --out (None when
    the limits go inline, or nothing is written)."""
    if args.inline_limits:
        if args.limits_out is not None:
            raise ScenarioError("lab fit: --inline-limits and --limits-out exclude each other")
        if out is None:
            raise ScenarioError("lab fit: --inline-limits needs --out FILE.yaml")
        return None
    if args.limits_out is not None:
        limits_out = Path(args.limits_out)
    elif out is not None:
        stem = out.name[:-len(out.suffix)] if out.suffix else out.name
        limits_out = out.with_name(f"{stem}.limits{out.suffix or '.yaml'}")
    else:
        return None
    if out is not None and limits_out.resolve() == out.resolve():
        raise ScenarioError(f"lab fit: --limits-out {limits_out} is the scenario's own file")
    return limits_out
