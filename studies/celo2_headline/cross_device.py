"""How far a held-out result moves from one device to another: the same evaluation made twice.

    python -m studies.celo2_headline.cross_device REFERENCE_DIR OTHER_DIR [--out FILE]

Both directories are `--results-dir`s of `evaluate.py` (or their `evaluation/` folders). Every
result file present in both is compared: whether the same values were swept and the same one
chosen on validation, the chosen value's test loss in each and their relative difference, and
the largest relative difference of any swept value's test loss. Each side's `environment`
(commit, versions, backend, device kind, CPU model) is recorded beside it, so the comparison says
what moved between what. Writes FILE (default: results/cross_device.json) and prints one line
per result.
"""

import argparse
import math
from pathlib import Path
from typing import Any

from studies import common


HERE = Path(__file__).parent


def evaluation_dir(path: Path) -> Path:
    """`path`/evaluation when it exists (a results directory), else `path` itself."""
    return path / "evaluation" if (path / "evaluation").is_dir() else path


def relative(a: float | None, b: float | None) -> float:
    """|b − a| / |a|; nan when either is missing or not finite, or `a` is 0."""
    x, y = common.nan_if_none(a), common.nan_if_none(b)
    if not (math.isfinite(x) and math.isfinite(y)) or x == 0:
        return math.nan
    return abs(y - x) / abs(x)


def compare(reference: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """One result made twice: the chosen values, the chosen test losses and how far they (and
    every swept value's test loss) differ, None where a loss is missing or not finite; and
    both environments."""
    sweep = [
        relative(a["test_loss"], b["test_loss"]) for a, b in zip(reference["sweep"], other["sweep"])
    ]
    finite = [d for d in sweep if math.isfinite(d)]
    swept = [[v["value"] for v in r["sweep"]] for r in (reference, other)]
    return {
        "same_values": swept[0] == swept[1],
        "same_choice": reference["selected"] == other["selected"],
        "values": [reference["value"], other["value"]],
        "test_losses": [reference["test_loss"], other["test_loss"]],
        "relative_difference": common.finite_or_none(
            relative(reference["test_loss"], other["test_loss"])
        ),
        "largest_sweep_difference": max(finite) if finite else None,
        "environments": [reference.get("environment"), other.get("environment")],
    }


def compare_dirs(reference: Path, other: Path) -> dict[str, dict[str, Any]]:
    """Every result file (`*.json` below the evaluation folders, the settings file aside)
    present under both, by its path relative to the folder."""
    a, b = evaluation_dir(reference), evaluation_dir(other)
    found = {}
    for path in sorted(a.rglob("*.json")):
        relative_path = path.relative_to(a)
        twin = b / relative_path
        if relative_path.name == "settings.json" or not twin.is_file():
            continue
        found[str(relative_path)] = compare(common.load_json(path), common.load_json(twin))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("reference", help="a results directory (or its evaluation/ folder)")
    parser.add_argument("other", help="the same evaluation made elsewhere")
    parser.add_argument("--out", default=str(HERE / "results" / "cross_device.json"))
    args = parser.parse_args()
    found = compare_dirs(Path(args.reference), Path(args.other))
    if not found:
        raise SystemExit(f"No result file is present under both {args.reference} and {args.other}.")
    common.write_json(
        Path(args.out),
        {
            "results": found,
            "reference": args.reference,
            "other": args.other,
            "environment": common.environment(),
        },
    )
    for name, c in found.items():
        if not c["same_values"]:
            print(f"{name}: DIFFERENT swept values: not the same evaluation")
            continue
        print(
            f"{name}: choice {'same' if c['same_choice'] else 'DIFFERENT'} {c['values']}, "
            f"test loss {c['test_losses'][0]} vs {c['test_losses'][1]} (relative difference "
            f"{c['relative_difference']}; largest over the sweep {c['largest_sweep_difference']})"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
