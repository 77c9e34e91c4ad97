"""What the fresh cells' evaluation has left, in the order it runs (`evaluate.work_order`).

    python -m studies.fresh_cells status

One line per missing (optimizer, cell), with the values its tuning has kept so far
(`runs/tuning_cache/`), and a count of the results in. Reads files only; starts nothing. A
result file counts as in when it exists, as `evaluate` skips it; the report may still leave one
out as stale (made with other weights than the package's), so its count can be lower.
"""

import argparse
from pathlib import Path

from studies.fresh_cells import evaluate, settings


def pending(
    names: list[str], results: Path = evaluate.RESULTS, cache: Path = evaluate.TUNING_CACHE
) -> list[tuple[str, str, int]]:
    """Each missing (optimizer, cell key, values kept) of `names`' results, in the order the
    evaluation runs."""
    left = []
    for name, task, horizon in evaluate.work_order(settings.CELLS, names):
        key = f"{task}@{horizon}"
        if not (results / name / f"{key}.json").exists():
            kept = len(list((cache / name / key).glob("value_*.json")))
            left.append((name, key, kept))
    return left


def main(argv: list[str] | None = None) -> int:
    """Print the count of results in and every missing one, in the order they run."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=evaluate.RESULTS)
    parser.add_argument("--cache-dir", type=Path, default=evaluate.TUNING_CACHE)
    args = parser.parse_args(argv)
    names = evaluate.optimizers(None)
    left = pending(names, args.results_dir, args.cache_dir)
    total = len(names) * len(settings.CELLS)
    print(f"{total - len(left)} of {total} results in; left, in the order they run:")
    for name, key, kept in left:
        note = f"  ({kept} value{'s' * (kept != 1)} kept)" if kept else ""
        print(f"  {name:16s} {key}{note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
