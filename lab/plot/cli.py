"""`lab plot`: its parser and its handler."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """`lab plot TRACE -o FILE.png [--vs OTHER_TRACE]`, handled by `plot_cmd`."""
    plot = sub.add_parser("plot", help="draw a recorded run as a picture for a review")
    plot.set_defaults(handler=plot_cmd)
    plot.add_argument("trace", help="a trace file written by lab simulate or a real run")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png",
                      help="where to write the picture (.png, .svg or .pdf)")
    plot.add_argument("--vs", metavar="OTHER_TRACE", help="a second run, drawn below the first")


def plot_cmd(args: argparse.Namespace) -> int:
    from lab.plot.charts import check_output, plot_traces, require_matplotlib

    require_matplotlib()
    check_output(args.output)  # before reading any trace: a bad -o is one line, exit 2
    paths = [args.trace, *([args.vs] if args.vs else [])]
    print(f"picture {plot_traces(paths, args.output)}", file=sys.stderr)
    return 0
