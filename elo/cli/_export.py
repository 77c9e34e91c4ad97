"""`elo export`: write a trained learned optimizer for use elsewhere."""

import argparse
from pathlib import Path
from typing import Any

from .._files._optimizer_file import load_optimizer, save_optimizer
from .._files._pretrained import PRETRAINED_SCHEME
from .._files._pylo import export_pylo
from ._common import CLIError, load_pretrained


DESCRIPTION = """\
Export the learned optimizer of a run (its latest checkpoint), a checkpoint file or an exported
optimizer file.

  --format eqx    one .eqx file: a JSON line (class, hyperparameters, SHA-256) and the weights;
                  read it back with elo.load_optimizer(path). Default: RUN/optimizer.eqx.
  --format pylo   PyLO's PyTorch layout in safetensors (network.input.weight = w0.T, ...), with
                  the hyperparameters as metadata. A path ending in .safetensors is one file;
                  otherwise a directory with model.safetensors and config.json, loadable with
                  MetaMLP.from_pretrained(DIR). Default: RUN/pylo/.

examples:
  elo export runs/elo --format eqx
  elo export runs/elo --format pylo --out exported/elo_small_fc
  elo export runs/elo/checkpoint.eqx --format pylo --out elo_small_fc.safetensors
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a learned optimizer (plain .eqx, or PyLO/PyTorch safetensors)",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "source",
        metavar="RUN",
        help="run directory, checkpoint, .eqx file, or pretrained:NAME (a shipped optimizer)",
    )
    parser.add_argument("--format", required=True, choices=("eqx", "pylo"), help="output format")
    parser.add_argument("--out", metavar="PATH", help="output file or directory")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from_package = args.source.startswith(PRETRAINED_SCHEME)
    if from_package:
        if not args.out:
            raise CLIError("exporting pretrained:NAME needs --out PATH.")
        lo = load_pretrained(args.source)
        source = Path(args.out)
    else:
        source = Path(args.source)
        if not source.exists():
            raise CLIError(f"{source} does not exist.")
        lo = load_optimizer(source)
    base = source if source.is_dir() else source.parent / source.stem
    if args.format == "eqx":
        out = (
            Path(args.out)
            if args.out
            else (source / "optimizer.eqx" if source.is_dir() else Path(f"{base}.optimizer.eqx"))
        )
        if not from_package and out.resolve() == source.resolve():
            raise CLIError(f"--out {out} would overwrite the source; choose another path.")
        save_optimizer(out, lo)
    else:
        out = (
            Path(args.out)
            if args.out
            else (source / "pylo" if source.is_dir() else Path(f"{base}.pylo"))
        )
        out = export_pylo(out, lo)
    print(f"wrote {out}")
    return 0
