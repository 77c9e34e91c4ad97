"""The fresh cells' evaluation (`rule.md` §1, §2, §4): every optimizer tuned on every fresh cell.

    python -m studies.fresh_cells evaluate               # every cell, in rule.md's amended order
    python -m studies.fresh_cells evaluate --cell 1-3    # cells 1 to 3 of rule.md's table
    python -m studies.fresh_cells evaluate --optimizer adamw --optimizer celo2

One result file per (optimizer, cell): `results/<optimizer>/<task>@<horizon>.json`, written
atomically and never made twice (`studies.harness.cells.cached`: a lock per file lets two
drivers share the work). Each value of a cell is kept as it finishes (`elo.TuningCache` under
`runs/tuning_cache/`, out of git), so a killed driver loses at most the value it was
running and the same command resumes the cell. The optimizers the verdict reads (AdamW and
`celo2`) run on every cell first, in `settings.CELLS`'s order, then the published Celo2, then
Muon, then the rest (`work_order`, `settings.EVALUATION_ORDER`).

Refuses to start while `celo2` is not shipped: the ship rule (`ship_rule.py`) picks it, and
shipping it is a reviewed commit made before the first fresh result (rule.md §3).
"""

import argparse
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import elo
from studies import common
from studies.fresh_cells import settings, tasks
from studies.harness import cells
from studies.harness.provenance import installed_weights_sha256


HERE = Path(__file__).parent
RESULTS = HERE / "results"
# Each cell's values while it is tuned (`elo.TuningCache`), out of git.
TUNING_CACHE = HERE / "runs" / "tuning_cache"


def log(message: str) -> None:
    common.log("fresh-cells", message)


def get_task(name: str) -> elo.tasks.AbstractTask:
    """A fresh cell's task by name: the kinds `tasks.py` builds, else `elo.tasks.get_task`."""
    if name == tasks.ADDING:
        return tasks.adding_task()
    if name == tasks.FRIEDMAN:
        return tasks.friedman_task()
    for dataset in ("mnist", "fashionmnist"):
        for widths in ((32, 8), (64, 16)):
            if name == tasks.autoencoder_name(dataset, widths):
                return tasks.autoencoder_task(dataset, widths)
    return elo.tasks.get_task(name)


def parse_cells(spec: str | None) -> list[tuple[str, int]]:
    """The cells `--cell` names by their 1-based number in rule.md's table (`"4"`, `"1-3"`,
    `"1,5"`); every cell without it."""
    if spec is None:
        return list(settings.CELLS)
    numbers: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        try:
            numbers += range(int(low), int(high or low) + 1)
        except ValueError:
            raise SystemExit(f"--cell {spec!r}: give cell numbers like 4, 1-3 or 1,5.") from None
    bad = [n for n in numbers if not 1 <= n <= len(settings.CELLS)]
    if bad:
        raise SystemExit(f"--cell {bad[0]}: the cells are numbered 1 to {len(settings.CELLS)}.")
    return [settings.CELLS[n - 1] for n in dict.fromkeys(numbers)]


def work_order(
    chosen_cells: Sequence[tuple[str, int]], names: Sequence[str]
) -> list[tuple[str, str, int]]:
    """(optimizer, task, horizon) in the order they run (rule.md, "Order" and its amendments):
    each group of `settings.EVALUATION_ORDER` on every chosen cell before the next group, the
    verdict's optimizers first; an optimizer in no group runs last."""
    grouped = [o for group in settings.EVALUATION_ORDER for o in group]
    groups = [*settings.EVALUATION_ORDER, tuple(n for n in names if n not in grouped)]
    return [
        (n, task, horizon)
        for group in groups
        for task, horizon in chosen_cells
        for n in group
        if n in names
    ]


def learned_optimizer(name: str) -> elo.AbstractLearnedOptimizer:
    """A shipped learned optimizer with protocol v2's warm-up + cosine step (rule.md §1)."""
    lo = elo.pretrained(name)
    schedule = settings.LEARNED_SCHEDULES.get(type(lo).__name__)
    if schedule is None:
        raise SystemExit(f"{name} is a {type(lo).__name__}: rule.md §1 defines no schedule for it.")
    return lo.with_hyperparameters(**schedule)


def tuning(optimizer: str, horizon: int) -> dict[str, Any]:
    """`elo.tune`'s arguments for `optimizer` on a cell of `horizon` steps (rule.md §1)."""
    grid = settings.GRIDS["learned" if optimizer in settings.LEARNED else optimizer]
    return {
        "num_steps": horizon,
        "values": elo.log_grid(*grid, settings.SWEEP_POINTS),
        "seeds": settings.EVAL_SEEDS,
        # The splits are measured at the start and at the end only: the rule and the report read
        # no other point, and the points in between change no training step (rule.md,
        # amendments of 2026-11-29, which say what elo.tune's divergence check no longer sees).
        "eval_every": horizon,
        "extend_edges": settings.MAX_EDGE_EXTENSIONS,
    }


def per_seed(result: elo.Evaluation) -> dict[str, list[float | None]]:
    """A run's per-seed figures: final validation loss, and final test loss capped at its
    initial test loss, a non-finite end counting at the initial loss (rule.md §1)."""
    test = np.asarray(result.test_loss, np.float64)
    final, initial = test[:, -1], test[:, 0]
    capped = np.where(np.isfinite(final), np.minimum(final, initial), initial)
    validation = np.asarray(result.validation_loss, np.float64)[:, -1]
    return {
        "validation_loss": [common.finite_or_none(float(v)) for v in validation],
        "test_loss": [float(v) for v in capped],
        "test_loss_uncapped": [common.finite_or_none(float(v)) for v in final],
        "initial_test_loss": [float(v) for v in initial],
        "diverged": [bool(not np.isfinite(v)) for v in final],
        "worse_than_initial": [bool(np.isfinite(f) and f > i) for f, i in zip(final, initial)],
    }


def summarise(tuned: elo.Tuned, seconds: float) -> dict[str, Any]:
    """One optimizer on one cell: every swept value's per-seed figures, the choice and its
    edge mark."""
    sweep = [{"value": v, **per_seed(r)} for v, r in zip(tuned.values, tuned.sweep)]
    chosen = sweep[tuned.selected]
    return {
        "name": tuned.name,
        "hyperparameter": tuned.hyperparameter,
        "values": list(tuned.values),
        "extended": list(tuned.extended),
        "selected": tuned.selected,
        "value": tuned.value,
        "at_edge": tuned.at_edge,
        "validation_loss": float(
            np.mean([np.inf if v is None else v for v in chosen["validation_loss"]])
        ),
        "test_loss": float(np.mean(chosen["test_loss"])),
        "sweep": sweep,
        "steps": [int(s) for s in tuned.best.steps],
        "seconds": seconds,
        "environment": common.environment(),
    }


def evaluate_cell(results: Path, optimizer: str, task_name: str, horizon: int) -> None:
    """Tune `optimizer` on one cell into its result file, unless it exists or another driver
    holds it (`studies.harness.cells.cached`)."""
    path = results / optimizer / f"{task_name}@{horizon}.json"

    def compute() -> dict[str, Any]:
        started = time.perf_counter()
        if optimizer in settings.LEARNED:
            subject: Any = learned_optimizer(optimizer)
            extra = {"weights_sha256": installed_weights_sha256(optimizer)}
        else:
            subject, extra = optimizer, {"weight_decay": settings.WEIGHT_DECAY[optimizer]}
        tuned = elo.tune(
            subject,
            get_task(task_name),
            name=optimizer,
            cache=elo.TuningCache(values),
            **tuning(optimizer, horizon),
        )
        return summarise(tuned, time.perf_counter() - started) | extra

    # Each value kept as it finishes (rule.md, amendment of 2026-11-29): a cell longer than a
    # working session resumes; `seconds` is then the last session's share.
    values = TUNING_CACHE / optimizer / f"{task_name}@{horizon}"
    started = time.perf_counter()
    if cells.cached(path, compute, log=log):
        log(f"{optimizer} {task_name}@{horizon}: {time.perf_counter() - started:.0f} s")
        shutil.rmtree(values, ignore_errors=True)  # the cell is written: its values are done


def optimizers(names: Sequence[str] | None) -> list[str]:
    """The optimizers to run (rule.md §4), checked; refuses while `celo2` is not shipped."""
    every = [*settings.BASELINES, *settings.LEARNED]
    chosen = every if not names else list(names)
    unknown = [n for n in chosen if n not in every]
    if unknown:
        raise SystemExit(
            f"--optimizer {unknown[0]!r}: the study's optimizers are {', '.join(every)}."
        )
    if "celo2" in chosen and "celo2" not in elo.available_pretrained():
        raise SystemExit(
            "`celo2` is not shipped yet: run `python -m studies.fresh_cells ship-rule` once every "
            "candidate has its headline results, and ship its winner as `celo2` in a reviewed "
            "commit (rule.md §3) before any fresh result."
        )
    if {"celo2", "celo2_published"} <= set(chosen) and installed_weights_sha256(
        "celo2"
    ) == installed_weights_sha256("celo2_published"):
        log("celo2 is the published Celo2 (the ship rule's winner): evaluated once, as celo2")
        chosen.remove("celo2_published")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cell", help="cell numbers of rule.md's table (4, 1-3, 1,5)")
    parser.add_argument("--optimizer", action="append", help="this optimizer only (repeatable)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    names = optimizers(args.optimizer)
    for name, task_name, horizon in work_order(parse_cells(args.cell), names):
        evaluate_cell(args.results_dir, name, task_name, horizon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
