"""The main runs on the headline study's 14 cells (`main_rule.md` §4): what ship rule v2 reads.

    python -m studies.deployed_schedule headline                    # every summarised main run
    python -m studies.deployed_schedule headline --run pes_celo2/s0

Each summarised main run's selected checkpoint is tuned on the 14 headline cells exactly as
ship rule v2's first candidates were: `studies.celo2_headline.evaluate`'s `decayed` command (7
multipliers over [0.1, 10], 3 evaluation seeds, choice on validation, the warm-up + cosine
step, which this study's checkpoints already carry), into `results/evaluation/decayed/<method>/
s<seed>/best/`, each value kept as it finishes under `runs/tuning_cache/headline/` (this
study's, so that no value of the headline study's own checkpoints is ever met). A run that is
not summarised yet is not among them. Two runs whose selected checkpoints are the same
optimizer (PES-Celo2 seeds 1 and 2 both selected the shared warm start) are tuned once, the
second's results copied and marked `copied_from` (`evaluate.without_twins`). Two drivers can
share the work (a lock per result). Refuses to start until `main_rule.md`, which registers
it, is committed as it is.
"""

import argparse
from pathlib import Path

import jax

from studies.celo2_headline import evaluate
from studies.deployed_schedule import main_runs


HERE = Path(__file__).parent
RESULTS = HERE / "results"
TUNING_CACHE = HERE / "runs" / "tuning_cache" / "headline"


def run(results: Path, runs: list[str] | None = None, tasks: list[str] | None = None) -> None:
    """Every summarised main run (or those `runs` names) on every headline cell (or those of
    `tasks`), with this study's tuning cache."""
    out = results / "evaluation"
    evaluate.check_settings(out)
    # The headline's evaluation keeps its tuning cache root as a module setting (its
    # --resumable); this study's own for the call, the headline's back after it.
    before, evaluate.TUNING_CACHE_ROOT = evaluate.TUNING_CACHE_ROOT, TUNING_CACHE
    try:
        # float32 matrix products on every device, as the headline's evaluation.
        with jax.default_matmul_precision("highest"):
            evaluate.run_decayed(out, results, tasks, runs)
    finally:
        evaluate.TUNING_CACHE_ROOT = before


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", action="append", metavar="METHOD/sSEED", help="only this run")
    parser.add_argument("--task", action="append", metavar="NAME", help="only this task's cells")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not main_runs.committed_as_is(main_runs.MAIN_RULE):
        raise SystemExit(
            f"{main_runs.MAIN_RULE} is not committed as it is: it registers this evaluation "
            "(§4), so it is committed before any of its results."
        )
    run(args.results_dir, args.run, args.task)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
