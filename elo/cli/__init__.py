"""The `elo` command: `elo meta-train`, `elo evaluate`, `elo plot`, `elo export`."""

import os
import sys
from collections.abc import Sequence

from .. import __version__
from .._files._framing import CheckpointError
from . import _evaluate, _export, _meta_train, _plot
from ._common import ArgumentParser, CLIError


DESCRIPTION = """\
Meta-train learned optimizers with ELO, evaluate them against hand-designed optimizers, plot the
curves and export the result.

examples:
  elo meta-train --preset elo_small_fc_cpu --steps 200 --out runs/elo
  elo evaluate runs/elo --task mlp-w128-d3_fashionmnist-8x8x1 --steps 1000 --seeds 3
  elo evaluate adamw --task mlp-w128-d3_fashionmnist-8x8x1 --steps 1000 --seeds 3 --lr-sweep
  elo plot runs/elo runs/elo/evaluations/*.json evaluations/*.json
  elo export runs/elo --format pylo
  elo --version

Run 'elo COMMAND --help' for a command's options. Set ELO_DEBUG=1 to see tracebacks.
"""


def build_parser() -> ArgumentParser:
    """The argument parser of the `elo` command."""
    parser = ArgumentParser(prog="elo", description=DESCRIPTION)
    parser.add_argument(
        "--version", action="version", version=f"elo {__version__}", help="print the version"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (_meta_train, _evaluate, _plot, _export):
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `elo` command line.

    Errors that the user can fix (a missing directory, an unknown preset, a bad `--set` field
    or value, a corrupt or incompatible checkpoint, ...) are reported as one line on stderr with
    exit status 2 and no traceback (set `ELO_DEBUG=1` for the traceback).

    **Arguments:**

    - `argv`: the arguments after `elo` (default: `sys.argv[1:]`).

    **Returns:**

    The exit status: 0 on success, 2 on a usage or input error, 130 when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
        return int(args.func(args))
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    except (CLIError, CheckpointError, ValueError, OSError) as e:
        if os.environ.get("ELO_DEBUG"):
            raise
        message = str(e).strip() or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None and e.strerror:
            message = f"{e.filename}: {e.strerror}"
        print(f"elo: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("elo: interrupted", file=sys.stderr)
        return 130


__all__ = ["build_parser", "CLIError", "main"]
