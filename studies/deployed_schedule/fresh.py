"""The held-out evaluation of the main runs (`main_rule.md` §2): each compared checkpoint tuned
on the fresh cells of `studies/fresh_cells` by protocol v2, as the fresh cells' optimizers were.

    python -m studies.deployed_schedule fresh                      # every checkpoint, in order
    python -m studies.deployed_schedule fresh --checkpoint elo_celo2/s0

The checkpoints (`checkpoints`, in the order they run): each main run's selected one
(`results/main/<method>/s<seed>/best_optimizer.eqx`, once the run is summarised: its
`meta.json` is written; an unfinished run is skipped and said so), then the headline study's
constant-step PES-Celo2 seeds 1 and 2 (its seed 0 is the shipped `celo2`, whose fresh results
exist). Each runs with the settings it was meta-trained with, its schedule made protocol v2's
warm-up + cosine step (for this study's checkpoints, what they already carry); only its step
multiplier is tuned.

One result file per (checkpoint, cell): `results/fresh/<checkpoint>/<task>@<horizon>.json`, in
the fresh cells' format (`studies.fresh_cells.evaluate.summarise`), recording the checkpoint
and its SHA-256: a result made from other weights is set aside and made again. Each value is
kept as it finishes (`elo.TuningCache` under `runs/tuning_cache/fresh/`), so a stopped driver
resumes within a cell. A checkpoint whose file is byte-identical to an earlier one's (two
seeds that both selected the shared warm start) is tuned once: the later one's results are the
earlier one's, copied, naming it in `copied_from` and the copying commit in `copied_by`
(`twins`; tuning is deterministic). Refuses to start until `main_rule.md`, which registers this
evaluation, and then the ship decision (`results/ship_rule.json`, §4) are committed as they
are: what ships is decided before any held-out result exists.
"""

import argparse
import hashlib
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.deployed_schedule import main_runs, settings, ship_rule
from studies.fresh_cells import evaluate as fresh_cells, settings as fresh_settings
from studies.harness import cells


HERE = Path(__file__).parent
RESULTS = HERE / "results"
TUNING_CACHE = HERE / "runs" / "tuning_cache" / "fresh"
HEADLINE_MAIN = HERE.parent / "celo2_headline" / "results" / "main"


def log(message: str) -> None:
    common.log("deployed-fresh", message)


def held_out_cells() -> list[tuple[str, int]]:
    """The fresh cells of `main_rule.md` §2: the fresh cells' table without the ones it leaves
    out for budget (`settings.FRESH_CELLS_LEFT_OUT`), in the table's order."""
    return [c for c in fresh_settings.CELLS if c not in settings.FRESH_CELLS_LEFT_OUT]


def checkpoints(results: Path = RESULTS) -> dict[str, Path]:
    """Every compared checkpoint's name and file, in the order they run (`main_rule.md` §2):
    this study's runs seed by seed (ELO, then PES), then the headline's constant-step PES."""
    named = {
        f"{method}/s{seed}": results / "main" / method / f"s{seed}" / "best_optimizer.eqx"
        for seed in settings.MAIN_SEEDS
        for method in ("elo_celo2", "pes_celo2")
    }
    for seed in settings.FRESH_HEADLINE_PES_SEEDS:
        named[f"headline_pes_celo2/s{seed}"] = (
            HEADLINE_MAIN / "pes_celo2" / f"s{seed}" / "best_optimizer.eqx"
        )
    return named


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def protocol_v2(lo: elo.AbstractLearnedOptimizer) -> elo.AbstractLearnedOptimizer:
    """`lo` with protocol v2's schedule shape (`studies/fresh_cells/rule.md` §1) on its own
    rate, every other setting as it was meta-trained."""
    schedule = fresh_settings.LEARNED_SCHEDULES.get(type(lo).__name__)
    if schedule is None:
        raise SystemExit(f"a {type(lo).__name__}: protocol v2 defines no schedule for it.")
    return lo.with_hyperparameters(**schedule)


def evaluate_cell(results: Path, name: str, checkpoint: Path, task_name: str, horizon: int) -> None:
    """Tune the checkpoint `name` (file `checkpoint`) on one cell into its result file, unless
    it exists for these weights or another driver holds it."""
    path = results / "fresh" / name / f"{task_name}@{horizon}.json"
    values = TUNING_CACHE / name / f"{task_name}@{horizon}"
    required = {"checkpoint": name, "checkpoint_sha256": file_sha256(checkpoint)}

    def compute() -> dict[str, Any]:
        started = time.perf_counter()
        tuned = elo.tune(
            protocol_v2(elo.load_optimizer(checkpoint)),
            fresh_cells.get_task(task_name),
            name=name,
            cache=elo.TuningCache(values),
            **fresh_cells.tuning("celo2", horizon),  # the learned optimizers' grid
        )
        return fresh_cells.summarise(tuned, time.perf_counter() - started)

    started = time.perf_counter()
    if cells.cached(path, compute, required=required, log=log):
        log(f"{name} {task_name}@{horizon}: {time.perf_counter() - started:.0f} s")
        shutil.rmtree(values, ignore_errors=True)  # the cell is written: its values are done


def twins(every: dict[str, Path]) -> dict[str, str]:
    """Each checkpoint of `every` whose file is byte-identical to an earlier one's, mapped to the
    first of them (files not written yet are nobody's twin)."""
    first_by_digest: dict[str, str] = {}
    copies: dict[str, str] = {}
    for name, checkpoint in every.items():
        if not checkpoint.is_file():
            continue
        digest = file_sha256(checkpoint)
        if digest in first_by_digest:
            copies[name] = first_by_digest[digest]
        else:
            first_by_digest[digest] = name
    return copies


def copy_from_twin(
    results: Path, name: str, checkpoint: Path, source: str, task_name: str, horizon: int
) -> None:
    """The result of checkpoint `name` (file `checkpoint`) on one cell as a copy of its twin
    `source`'s, once that exists and records these weights (`cells.copied`: named for `name`,
    marked `copied_from`, its path under `results/fresh`, and `copied_by`; under the result's
    lock; a result for other weights set aside, none overwritten)."""
    cell = f"{task_name}@{horizon}.json"
    origin = results / "fresh" / source / cell
    if not origin.is_file():
        log(f"{name} {task_name}@{horizon}: waits for {source}'s result (the same weights)")
        return
    sha256 = file_sha256(checkpoint)
    if cells.copied(
        origin,
        results / "fresh" / name / cell,
        f"{source}/{cell}",
        source_records={"checkpoint_sha256": sha256},
        fields={"name": name},
        required={"checkpoint": name, "checkpoint_sha256": sha256},
        log=log,
    ):
        log(f"{name} {task_name}@{horizon}: the same weights as {source}, copied")


def chosen(names: Sequence[str] | None, every: dict[str, Path]) -> dict[str, Path]:
    """The checkpoints `--checkpoint` names (every one without it), refusing an unknown name."""
    if not names:
        return every
    unknown = [n for n in names if n not in every]
    if unknown:
        raise SystemExit(
            f"--checkpoint {unknown[0]!r}: the compared checkpoints are {', '.join(every)}."
        )
    return {n: every[n] for n in every if n in names}


def run(results: Path, names: Sequence[str] | None = None) -> None:
    """Every chosen checkpoint on every cell of `held_out_cells`, checkpoint by checkpoint; a
    checkpoint whose file does not exist yet (its run not summarised) is skipped, said so. A
    twin (`twins`) copies its results from the checkpoint it equals, at its turn and again at
    the end (another driver may have been tuning them meanwhile)."""
    every = checkpoints(results)
    copies = twins(every)
    summarised = {}
    for name, checkpoint in chosen(names, every).items():
        # A run is summarised once its meta.json is written, last (`main_runs.summarise`).
        if (checkpoint.parent / "meta.json").is_file():
            summarised[name] = checkpoint
        else:
            log(f"{name}: its main run is not summarised yet (no meta.json); skipped")
    for name, checkpoint in summarised.items():
        for task_name, horizon in held_out_cells():
            if name in copies:
                copy_from_twin(results, name, checkpoint, copies[name], task_name, horizon)
            else:
                evaluate_cell(results, name, checkpoint, task_name, horizon)
    for name in [n for n in summarised if n in copies]:
        for task_name, horizon in held_out_cells():
            copy_from_twin(results, name, summarised[name], copies[name], task_name, horizon)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", action="append", help="only this one (repeatable)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    chosen(args.checkpoint, checkpoints(args.results_dir))  # an unknown name stops here
    if not main_runs.committed_as_is(main_runs.MAIN_RULE):
        raise SystemExit(
            f"{main_runs.MAIN_RULE} is not committed as it is: it registers this evaluation "
            "(§2), so it is committed before any of its results."
        )
    ship_rule.require_committed_decision(args.results_dir)
    run(args.results_dir, args.checkpoint)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
