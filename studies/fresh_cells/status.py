"""What the fresh cells' evaluation has left, in the order it runs (`evaluate.work_order`).

    python -m studies.fresh_cells status

One line per missing (optimizer, cell), with the values its tuning has kept so far
(`runs/tuning_cache/`), and a count of the results in. Reads files only; starts nothing.
"""

import argparse
from pathlib import Path

from studies.fresh_cells import evaluate, settings


def pending(
    results: Path = evaluate.RESULTS, cache: Path = evaluate.TUNING_CACHE
) -> list[tuple[str, str, int]]:
    """Each missing (optimizer, cell key, values kept), in the order the evaluation runs."""
    names = evaluate.optimizers(None)
    left = []
    for name, task, horizon in evaluate.work_order(settings.CELLS, names):
        key = f"{task}@{horizon}"
        if not (results / name / f"{key}.json").exists():
            kept = len(list((cache / name / key).glob("value_*.json")))
            left.append((name, key, kept))
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=evaluate.RESULTS)
    parser.add_argument("--cache-dir", type=Path, default=evaluate.TUNING_CACHE)
    args = parser.parse_args(argv)
    left = pending(args.results_dir, args.cache_dir)
    total = len(evaluate.optimizers(None)) * len(settings.CELLS)
    print(f"{total - len(left)} of {total} results in; left, in the order they run:")
    for name, key, kept in left:
        note = f"  ({kept} value{'s' * (kept != 1)} kept)" if kept else ""
        print(f"  {name:16s} {key}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
