"""What the lab's subcommands share: bounded flag types and the progress-bar choice.

Each job's subcommand (lab/simulate/cli.py, lab/sizing/cli.py, lab/loadtest/cli.py, ...)
builds its own parser and handler; this module holds the few pieces more than one of them
uses, so a seed or `--progress` means the same thing in every command.
"""

from __future__ import annotations

import argparse
import sys

from taskfuse.cliguard import number_arg
from taskfuse.core import bounds

# The lab's flags are bounded like every number (taskfuse.core.bounds): finite, within these.
#: A seed, as the scenario's `seed` takes it.
SEED = number_arg(int, 0, bounds.MAX_INT64)


def add_progress(parser: argparse.ArgumentParser) -> None:
    """`--progress`, the same in every command that runs something long."""
    parser.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                        help="progress bar on stderr (auto: when stderr is a terminal)")


def progress_wanted(args: argparse.Namespace) -> bool:
    """Whether to draw the progress bar: always, never, or when stderr is a terminal."""
    return args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
