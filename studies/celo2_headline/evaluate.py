"""The headline study's held-out evaluation: every optimizer tuned the same way on every cell.

    python -m studies.celo2_headline.evaluate baselines   # tuned AdamW, Muon and SGD
    python -m studies.celo2_headline.evaluate runs        # each finished main run, both checkpoints
    python -m studies.celo2_headline.evaluate horizon     # item 1: the small_fc study at 30K steps
    python -m studies.celo2_headline.evaluate shipped     # item 4: the optimizers elo ships
    python -m studies.celo2_headline.evaluate decayed     # item 4: Celo2 with a decayed step
    python -m studies.celo2_headline.evaluate added       # the 30K cell item 1 added, if any

`--task NAME` (repeatable) restricts any command to the cells of those tasks: the evaluation
of a 2-core machine takes tens of hours, and this lets one working session finish a task's
cells for every optimizer before it starts another task's.

`--checkpoints selected|final` (for `runs`) evaluates only the selected (or final) checkpoints.
`--run ARM/sSEED` (repeatable; for `runs` and `decayed`) restricts them to those main runs, e.g.
`--run pes_celo2/s1`: the checkpoint the rule ships, whose cells `ship.py` needs before the rest;
for `horizon`, to those of the small_fc study's checkpoints (`pes/s0` ... `elo/s4`), AdamW
still tuned: a check of one result on another device (`results/cross_device/`).
`--optimizer NAME` (repeatable; for `shipped`) restricts it to those shipped optimizers, and
`--decayed` (for `shipped`) tunes them with item 4's decayed schedule instead, into
`shipped_decayed/<name>/` (decision_rule.md: item 4 for `small_fc_mnist8`).
`--stack` (for `runs`, `horizon` and `added`) tunes the pending checkpoints of one architecture on a
cell together, `--stack-max` at a time, in one compiled program (`elo.tune_many`): for an
accelerator, where one tuning leaves the chip mostly idle. Each result records `stacked_with`
(how many were tuned together), `group_seconds` (their wall time) and `seconds` (its share).
On the CPU, whose cores the vmapped values and seeds already keep busy, little is to be gained
(not measured). Matrix products run at float32 precision everywhere (an accelerator's default
may be TF32), so that results made on different devices compare.

Each (optimizer, cell) is `elo.tune`: settings.SWEEP_POINTS values on a log grid (peak learning
rates of AdamW/Muon/SGD with warm-up and cosine decay; a learned optimizer's `learning_rate`
multiplier), settings.EVAL_SEEDS seeds, the value chosen on the validation split. Every result is
cached as JSON under --results-dir/evaluation; rerunning skips what exists. Two drivers can share
the work (a lock per result). A checkpoint equal to one before it (two runs that selected their
common starting network: a PES and an ELO run of one seed, or two seeds of one warm start) is
tuned once; the other gets its results, copied under the same lock, marked `copied_from` and
`copied_by` (the commit that copied; `environment` stays the tuning's), since tuning is
deterministic.

`shipped` tunes every optimizer of `elo.available_pretrained()` (`elo.pretrained(name)`) on every
cell into `shipped/<name>/<task>@<horizon>.json`: its test loss at `learning_rate=1` (the
result's `default_test_loss`) beside the tuned one, which the report sets beside tuned AdamW's.
Each result records the SHA-256 of the weights it was made with; a result made with other
weights is set aside (`<file>.stale-<digest[:12]>`) and made again, and the report ignores it.
These results are reported beside the study, outside its decision rule.

`added` tunes the baselines and every finished main run's selected checkpoint on the cell item 1
added to the main evaluation (`horizon_report.py`: the task at 30K steps on which PES failed at
the long horizon), into the usual `baselines/` and `runs/<arm>/s<seed>/best/` paths (AdamW's is
item 1's own result there, copied and marked `copied_from`); it refuses while item 1 is
undecided or added no cell. The report sets that cell beside the verdicts.

`decayed` (item 4's investigation, `decision_rule.md`) tunes the selected checkpoint of every
finished Celo2 main run again with the tuned baselines' schedule shape on its own rate
(`settings.DECAYED_SCHEDULE`: warm-up over 5% of the run, cosine decay to 0) into
`decayed/<arm>/s<seed>/best/<task>@<horizon>.json`; each result records the schedule
(`lo_schedule`), and one made with another is set aside like a shipped optimizer's stale result
and made again (the report leaves it out). Reported beside the verdicts, never in them.
"""

import argparse
import contextlib
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypedDict

import equinox as eqx
import jax
import numpy as np

import elo
from studies import common
from studies.celo2_headline import horizon_report, settings, shipped_report, tasks
from studies.harness import cells as cells_cache
from studies.harness.cells import set_aside_stale as set_aside_stale, stale_tag as stale_tag
from studies.harness.provenance import installed_weights_sha256


HERE = Path(__file__).parent
BASELINES = settings.BASELINES
SMALL_FC_STUDY = HERE.parent / "ablation_small_fc" / "results" / "runs"


def log(message: str) -> None:
    common.log("celo2-eval", message)


def cells(only: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """Every held-out (task, horizon) of the protocol, in a fixed order (`settings.cells`, which
    the report reads without importing `elo`); with `only`, those of the tasks it names."""
    every = settings.cells()
    if only is None:
        return every
    only = [only] if isinstance(only, str) else list(only)
    unknown = sorted(set(only) - {task for task, _ in every})
    if unknown:
        names = ", ".join(dict.fromkeys(task for task, _ in every))
        raise SystemExit(f"--task {unknown[0]!r} is not a held-out task of the study: {names}.")
    return [(task, horizon) for task, horizon in every if task in only]


def main_runs(results: Path, arms: Sequence[str] | None, only: Sequence[str] | None) -> list[Path]:
    """The summarised main runs of `arms` (None: every arm) under `results/main`
    (`<arm>/s<seed>`, sorted by arm, then seed); with `only`, those it names, refusing a name
    that is not one of them."""
    patterns = ["*"] if arms is None else list(arms)
    runs = [
        meta.parent for arm in patterns for meta in sorted(results.glob(f"main/{arm}/s*/meta.json"))
    ]
    if only is None:
        return runs
    names = {f"{run.parent.name}/{run.name}": run for run in runs}
    unknown = sorted(set(only) - set(names))
    if unknown:
        known = ", ".join(names) or "none yet"
        raise SystemExit(
            f"--run {', '.join(map(repr, unknown))}: not a summarised main run of "
            f"{', '.join(arms or ['any arm'])} under {results / 'main'} (one with a meta.json); "
            f"these are: {known}."
        )
    return [run for name, run in names.items() if name in only]


def get_task(name: str) -> elo.tasks.AbstractTask:
    """A held-out task by name: the two of `tasks.py`, else `elo.tasks.get_task`."""
    if name == tasks.REGRESSION:
        return tasks.regression_task()
    if name == tasks.RECURRENT:
        return tasks.recurrent_task()
    return elo.tasks.get_task(name)


def capped_final(result: elo.Evaluation) -> tuple[float, bool]:
    """The protocol's value of a run: the mean over seeds of the final test loss, each capped at
    its run's initial test loss, and whether it diverged."""
    test = np.asarray(result.test_loss, np.float64)
    final, initial = test[:, -1], test[:, 0]
    capped = np.where(np.isfinite(final), np.minimum(final, initial), initial)
    return float(np.mean(capped)), bool(result.diverged())


def summarise(tuned: Any, seconds: float) -> dict[str, Any]:
    """A tuned optimizer on one cell: the chosen value's figures, every value's, the default."""
    per_value = []
    for value, result in zip(tuned.values, tuned.sweep):
        test, diverged = capped_final(result)
        validation = float(np.mean(np.asarray(result.validation_loss, np.float64)[:, -1]))
        per_value.append(
            {
                "value": value,
                "validation_loss": common.finite_or_none(validation),
                "test_loss": common.finite_or_none(test),
                "diverged": diverged,
            }
        )
    chosen = tuned.best
    default = int(np.argmin([abs(math.log(v)) for v in tuned.values]))
    return {
        "name": tuned.name,
        "hyperparameter": tuned.hyperparameter,
        "selected": tuned.selected,
        "value": tuned.value,
        "test_loss": per_value[tuned.selected]["test_loss"],
        "diverged": per_value[tuned.selected]["diverged"],
        "default_index": default,
        "default_test_loss": per_value[default]["test_loss"],
        "default_diverged": per_value[default]["diverged"],
        "sweep": per_value,
        "steps": [int(s) for s in chosen.steps],
        "test_loss_curve": [  # a diverged seed makes the mean non-finite: JSON has no nan
            common.finite_or_none(float(v))
            for v in np.asarray(chosen.test_loss, np.float64).mean(0)
        ],
        "seconds": seconds,
        "environment": common.environment(),
    }


# With --resumable: where `elo.TuningCache` keeps each value of a cell being tuned (out of git).
TUNING_CACHE_ROOT: Path | None = None


def tune_cached(
    path: Path,
    optimizer: Any,
    task_name: str,
    horizon: int,
    required: dict[str, Any] | None = None,
) -> None:
    """Tune `optimizer` on one cell into `path`, unless it exists or another driver has it
    (`studies.harness.cells.cached`).

    With `required` (fields a result must record: a shipped optimizer's `weights_sha256`,
    `decayed`'s `lo_schedule`), the result records them, and a cached result that records other
    values (or none) is first set aside under a free name (`set_aside_stale`): kept, no longer
    read, made again.
    """

    def compute() -> dict[str, Any]:
        started = time.perf_counter()
        if TUNING_CACHE_ROOT is None:
            tuned = elo.tune(optimizer, get_task(task_name), **protocol(horizon))
            return summarise(tuned, time.perf_counter() - started)
        # --resumable: each value kept as it finishes; `seconds` is then the last session's
        # share, and the result says so.
        cache = elo.TuningCache(tuning_cache_dir(path))
        tuned = elo.tune(optimizer, get_task(task_name), **protocol(horizon), cache=cache)
        summary = summarise(tuned, time.perf_counter() - started)
        return summary | {"tuning_cache": True, "seconds_last_session_only": True}

    started = time.perf_counter()
    if cells_cache.cached(path, compute, required=required, log=log):
        log(f"{path.relative_to(path.parents[2])}: {time.perf_counter() - started:.0f} s")
        if TUNING_CACHE_ROOT is not None:
            # The cell is written: its values are no longer needed, and a later tuning of the
            # cell (other weights, another schedule) must not meet them.
            shutil.rmtree(tuning_cache_dir(path), ignore_errors=True)


def tuning_cache_dir(path: Path) -> Path:
    """Where --resumable keeps the values of the cell whose result is `path` (under
    `TUNING_CACHE_ROOT`, at the result's path below `evaluation/`)."""
    assert TUNING_CACHE_ROOT is not None
    evaluation = next(p for p in path.parents if p.name == "evaluation")
    return TUNING_CACHE_ROOT / path.relative_to(evaluation).with_suffix("")


class TuningArgs(TypedDict):
    """`elo.tune`'s and `elo.tune_many`'s arguments for one cell."""

    num_steps: int
    num_values: int
    seeds: int
    eval_every: int


def protocol(horizon: int) -> TuningArgs:
    """The protocol's tuning of one cell (`elo.tune`'s and `elo.tune_many`'s arguments)."""
    return {
        "num_steps": horizon,
        "num_values": settings.SWEEP_POINTS,
        "seeds": settings.EVAL_SEEDS,
        "eval_every": max(1, horizon // 10),
    }


def tune_cached_stacked(
    items: list[tuple[Path, elo.AbstractLearnedOptimizer]], task_name: str, horizon: int
) -> None:
    """`tune_cached` for several learned optimizers of one architecture at once: those of
    `items` (result path, optimizer) whose result is neither on disk nor locked by another
    driver are tuned together (`elo.tune_many`) and written one result each."""
    with contextlib.ExitStack() as locks:
        held = []
        for path, lo in items:
            if locks.enter_context(common.claimed(path)):
                held.append((path, lo))
        if not held:
            return
        started = time.perf_counter()
        tuned = elo.tune_many([lo for _, lo in held], get_task(task_name), **protocol(horizon))
        seconds = time.perf_counter() - started
        for (path, _), one in zip(held, tuned):
            extra = {"stacked_with": len(held), "group_seconds": seconds}
            common.write_json(path, summarise(one, seconds / len(held)) | extra)
        log(f"{task_name}@{horizon}: {len(held)} optimizers together, {seconds:.0f} s")


def architectures(
    items: list[tuple[Path, elo.AbstractLearnedOptimizer]],
) -> list[list[tuple[Path, elo.AbstractLearnedOptimizer]]]:
    """`items` grouped by architecture, in first-seen order: optimizers that differ only in
    their weights (`same_architecture`), which `elo.tune_many` takes together."""
    groups: list[list[tuple[Path, elo.AbstractLearnedOptimizer]]] = []
    for path, lo in items:
        for group in groups:
            if same_architecture(group[0][1], lo):
                group.append((path, lo))
                break
        else:
            groups.append([(path, lo)])
    return groups


def same_architecture(a: elo.AbstractLearnedOptimizer, b: elo.AbstractLearnedOptimizer) -> bool:
    """Whether `a` and `b` differ only in their weights: the same tree structure (static fields
    included), array shapes and dtypes, and non-array leaves; `elo.tune_many`'s rule."""
    (arrays_a, rest_a), (arrays_b, rest_b) = (eqx.partition(o, eqx.is_array) for o in (a, b))
    shapes_a = [(x.shape, x.dtype) for x in jax.tree.leaves(arrays_a)]
    shapes_b = [(x.shape, x.dtype) for x in jax.tree.leaves(arrays_b)]
    return (
        jax.tree.structure(arrays_a) == jax.tree.structure(arrays_b)
        and shapes_a == shapes_b
        and bool(eqx.tree_equal(rest_a, rest_b))
    )


def same_weights(a: elo.AbstractLearnedOptimizer, b: elo.AbstractLearnedOptimizer) -> bool:
    """Whether `a` and `b` are the same learned optimizer: the same architecture, equal weights."""
    learned = all(isinstance(o, elo.AbstractLearnedOptimizer) for o in (a, b))
    return (
        learned
        and same_architecture(a, b)
        and bool(eqx.tree_equal(eqx.filter(a, eqx.is_array), eqx.filter(b, eqx.is_array)))
    )


def without_twins(
    items: list[tuple[str, elo.AbstractLearnedOptimizer]],
) -> tuple[list[tuple[str, elo.AbstractLearnedOptimizer]], dict[str, list[str]]]:
    """`items` less every optimizer equal to an earlier one (`same_weights`), and for each kept
    name the names of its twins. Two runs can select the same checkpoint (a PES and an ELO run
    of one seed start from the same network, and both may be best there); tuning is
    deterministic, so one tuning serves both. Two seeds of one method can too, when both select
    the warm start they share."""
    kept: list[tuple[str, elo.AbstractLearnedOptimizer]] = []
    twins: dict[str, list[str]] = {}
    for name, lo in items:
        first = next((k for k, kept_lo in kept if same_weights(kept_lo, lo)), None)
        if first is None:
            kept.append((name, lo))
        else:
            twins.setdefault(first, []).append(name)
    return kept, twins


def copy_result(source: Path, target: Path, evaluation: Path) -> bool:
    """Copy the result `source` to `target` (`cells_cache.copied`: marked `copied_from`, its path
    under `evaluation`, and `copied_by`), unless `source` is missing or `target` exists; whether
    it copied."""
    return cells_cache.copied(source, target, str(source.relative_to(evaluation)), log=log)


def copy_to_twins(
    out: Path,
    twins: dict[str, list[str]],
    cell_list: list[tuple[str, int]],
    required: dict[str, Any] | None = None,
) -> None:
    """Copy each tuned result under `out` to its twins' directories (`without_twins`) with
    `cells_cache.copied` (marked `copied_from`, its path under `out`'s parent, the evaluation
    directory, and `copied_by`; under the twin result's lock; never over a result of the twin's
    own). With `required` (fields every result records, e.g. `decayed`'s `lo_schedule`), a
    source that records other values is not copied and a twin's stale result is set aside."""
    evaluation = out.parent
    for name, others in twins.items():
        for task, horizon in cell_list:
            source = out / name / f"{task}@{horizon}.json"
            for other in others:
                target = out / other / f"{task}@{horizon}.json"
                origin = str(source.relative_to(evaluation))
                if cells_cache.copied(
                    source, target, origin, source_records=required, required=required, log=log
                ):
                    log(f"{target.relative_to(evaluation)}: the same weights as {name}, copied")


def tune_cells(
    items: list[tuple[str, elo.AbstractLearnedOptimizer]],
    out: Path,
    cell_list: list[tuple[str, int]],
    stack: int,
) -> None:
    """Tune every (result directory under `out`, optimizer) of `items` on every cell, one at a
    time or, with `stack` > 0, up to `stack` of one architecture together per cell; an
    optimizer equal to an earlier one gets that one's results, copied (`without_twins`)."""
    items, twins = without_twins(items)
    copy_to_twins(out, twins, cell_list)
    if stack <= 0:
        for name, lo in items:
            for task, horizon in cell_list:
                tune_cached(out / name / f"{task}@{horizon}.json", lo, task, horizon)
                copy_to_twins(out, twins, [(task, horizon)])
        return
    for task, horizon in cell_list:
        cell_items = [(out / name / f"{task}@{horizon}.json", lo) for name, lo in items]
        for group in architectures(cell_items):
            for start in range(0, len(group), stack):
                tune_cached_stacked(group[start : start + stack], task, horizon)
        copy_to_twins(out, twins, [(task, horizon)])


def run_baselines(out: Path, only: Sequence[str] | None = None) -> None:
    for task, horizon in cells(only):
        for name in BASELINES:
            tune_cached(out / "baselines" / name / f"{task}@{horizon}.json", name, task, horizon)


def run_learned(
    out: Path,
    results: Path,
    only: Sequence[str] | None = None,
    stack: int = 0,
    checkpoints: Sequence[str] = ("best", "final"),
    only_runs: Sequence[str] | None = None,
) -> None:
    # Every run's selected checkpoint before any final one: the rule judges the selected ones,
    # and the final ones (reported, not judged) double the cost.
    runs = main_runs(results, None, only_runs)
    for which in checkpoints:
        items = [
            (
                f"{run.parent.name}/{run.name}/{which}",
                elo.load_optimizer(run / f"{which}_optimizer.eqx"),
            )
            for run in runs
        ]
        tune_cells(items, out / "runs", cells(only), stack)


def decayed(lo: elo.AbstractLearnedOptimizer) -> elo.AbstractLearnedOptimizer:
    """`lo` with item 4's test-time schedule (`settings.DECAYED_SCHEDULE`) on its own rate."""
    if not isinstance(lo, elo.Celo2):
        raise SystemExit(f"`decayed` evaluates Celo2 checkpoints; got a {type(lo).__name__}.")
    return lo.with_hyperparameters(**settings.DECAYED_SCHEDULE)


def run_decayed(
    out: Path,
    results: Path,
    only: Sequence[str] | None = None,
    only_runs: Sequence[str] | None = None,
) -> None:
    # Task by task (as `--task` orders the session's work), every finished run on each cell.
    chosen = {
        f"{run.parent.name}/{run.name}/best"
        for run in main_runs(results, settings.CELO2_ARMS, only_runs)
    }
    # Twins are found among every run, so that `--run` naming either of two twins tunes the
    # first of them and copies its results to the other.
    every = [
        (
            f"{run.parent.name}/{run.name}/best",
            decayed(elo.load_optimizer(run / "best_optimizer.eqx")),
        )
        for run in main_runs(results, settings.CELO2_ARMS, None)
    ]
    kept, twins = without_twins(every)
    twins = {n: others for n, others in twins.items() if {n, *others} & chosen}
    items = [(name, lo) for name, lo in kept if name in chosen or name in twins]
    required = {"lo_schedule": dict(settings.DECAYED_SCHEDULE)}
    for task, horizon in cells(only):
        for name, lo in items:
            path = out / "decayed" / name / f"{task}@{horizon}.json"
            tune_cached(path, lo, task, horizon, required=required)
        copy_to_twins(out / "decayed", twins, [(task, horizon)], required)


def long_horizon_checkpoints(only_runs: Sequence[str] | None) -> list[tuple[str, int]]:
    """Item 1's small_fc study checkpoints as (arm, seed), seeds first (so that stacked groups
    of six hold seeds 0-2 of both arms); with `only_runs`, those it names as `<arm>/s<seed>`,
    refusing a name that is not one of them."""
    every = [(a, s) for s in settings.LONG_HORIZON_SEEDS for a in settings.LONG_HORIZON_ARMS]
    if only_runs is None:
        return every
    names = {f"{a}/s{s}": (a, s) for a, s in every}
    unknown = sorted(set(only_runs) - set(names))
    if unknown:
        raise SystemExit(f"--run {unknown[0]!r} is not a checkpoint of item 1: {', '.join(names)}.")
    return [c for c in every if f"{c[0]}/s{c[1]}" in only_runs]


def run_long_horizon(
    out: Path,
    only: Sequence[str] | None = None,
    stack: int = 0,
    only_runs: Sequence[str] | None = None,
) -> None:
    if only is not None:
        cells(only)  # refuses a task the study does not hold out
    tasks = settings.LONG_HORIZON_TASKS
    long_cells = [(t, settings.LONG_HORIZON) for t in tasks if only is None or t in only]
    if not long_cells:
        log(f"no 30K cell among {list(only or ())}: item 1 uses {', '.join(tasks)}")
        return
    checkpoints = long_horizon_checkpoints(only_runs)
    for task, horizon in long_cells:
        tune_cached(out / "horizon" / "adamw" / f"{task}@{horizon}.json", "adamw", task, horizon)
    items = [
        (
            horizon_report.result_name(arm, seed),
            elo.load_optimizer(SMALL_FC_STUDY / arm / f"s{seed}" / "best_optimizer.eqx"),
        )
        for arm, seed in checkpoints
    ]
    tune_cells(items, out / "horizon", long_cells, stack)


def added_cell(out: Path) -> tuple[str, int]:
    """The cell item 1 added to the main evaluation, from the results under `out`/horizon;
    exits with the reason while item 1 is undecided or added none."""
    added = horizon_report.summarise(out)["added_cell"]
    if not added["decided"]:
        raise SystemExit(
            "Item 1 is not decided yet: run `evaluate.py horizon` until every PES checkpoint "
            "has its 30K result (or one of them settles it), then `report`."
        )
    if added["task"] is None:
        raise SystemExit("Item 1 added no cell: PES held at the long horizon; 30K stays out.")
    return added["task"], settings.LONG_HORIZON


def reuse_item1_adamw(out: Path, task: str, horizon: int) -> None:
    """Copy AdamW's item-1 result on the added cell (`horizon/adamw/`, made by the same
    protocol on the same cell) to `baselines/adamw/`, marked `copied_from`, rather than tune
    it again (about as long as a learned optimizer's tuning there on the CPU)."""
    source = out / "horizon" / "adamw" / f"{task}@{horizon}.json"
    target = out / "baselines" / "adamw" / f"{task}@{horizon}.json"
    if copy_result(source, target, out):
        log(f"{target.relative_to(out)}: item 1's result, copied")


def run_added(out: Path, results: Path, stack: int = 0) -> None:
    task, horizon = added_cell(out)
    reuse_item1_adamw(out, task, horizon)
    for name in BASELINES:
        tune_cached(out / "baselines" / name / f"{task}@{horizon}.json", name, task, horizon)
    items = [
        (f"{run.parent.name}/{run.name}/best", elo.load_optimizer(run / "best_optimizer.eqx"))
        for run in main_runs(results, None, None)
    ]
    tune_cells(items, out / "runs", [(task, horizon)], stack)


def installed_weights_digest(name: str) -> str:
    """The SHA-256 of the weights `elo.pretrained(name)` loads (the installed package's file),
    which must be the file the report reads (`shipped_report.weights_digest`, the source tree's)."""
    digest = installed_weights_sha256(name)
    if digest != shipped_report.weights_digest(name):
        raise SystemExit(
            f"the installed elo's {name}.eqx is not this source tree's "
            f"({shipped_report.PRETRAINED}): install this tree (pip install -e .) and rerun."
        )
    return digest


def shipped_to_tune(names: Sequence[str] | None) -> list[str]:
    """The shipped optimizers to tune: `names` (every one of `elo.available_pretrained()` when
    None), sorted; an unknown name stops the command with the names it could be."""
    available = sorted(elo.available_pretrained())
    unknown = sorted(set(names or ()) - set(available))
    if unknown:
        raise SystemExit(
            f"--optimizer {', '.join(map(repr, unknown))}: elo ships no such optimizer; "
            f"choose from {', '.join(available)}."
        )
    return available if names is None else sorted(set(names))


def with_decayed_schedule(
    lo: elo.AbstractLearnedOptimizer,
) -> tuple[elo.AbstractLearnedOptimizer | None, dict[str, Any]]:
    """`lo` with item 4's test-time schedule for its class (`settings.DECAYED_SCHEDULE` for
    Celo2, `settings.DECAYED_SCHEDULE_SMALL_FC` for SmallFC: warm-up over 5%, cosine decay to
    0), and the schedule; None in place of the optimizer when `lo` already has it."""
    if not isinstance(lo, elo.Celo2 | elo.SmallFC):
        raise SystemExit(f"item 4's decayed schedule is defined for Celo2 and SmallFC, not {lo!r}.")
    schedule = dict(settings.DECAYED_SCHEDULES[type(lo).__name__])
    current = lo.hyperparameters()
    if all(current.get(k) == v for k, v in schedule.items()):
        return None, schedule
    return lo.with_hyperparameters(**schedule), schedule


def run_shipped(
    out: Path,
    only: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    decay: bool = False,
) -> None:
    """Tune each shipped optimizer of `names` (default every one) on every cell of `only`
    (default every cell), as shipped, into `shipped/<name>/`; with `decay`, with item 4's
    decayed schedule (`with_decayed_schedule`) instead, into `shipped_decayed/<name>/`, skipping an
    optimizer that already ships with it."""
    for name in shipped_to_tune(names):
        digest = installed_weights_digest(name)
        lo = elo.pretrained(name)
        required: dict[str, Any] = {"weights_sha256": digest}
        folder = out / "shipped" / name
        if decay:
            decayed_lo, schedule = with_decayed_schedule(lo)
            if decayed_lo is None:
                log(f"{name} already ships with the decayed schedule: nothing to tune")
                continue
            lo = decayed_lo
            required["lo_schedule"] = schedule
            folder = out / "shipped_decayed" / name
        for task, horizon in cells(only):
            tune_cached(folder / f"{task}@{horizon}.json", lo, task, horizon, required=required)


def check_settings(out: Path) -> None:
    """Record the evaluation's settings (`settings.evaluation()`) in `out` with its first result;
    refuse to add results to `out` under other settings later."""
    path = out / "settings.json"
    current = settings.evaluation()
    if path.is_file() and common.load_json(path)["settings"] != current:
        raise SystemExit(f"{path} records other evaluation settings; use another --results-dir.")
    if not path.is_file():
        common.write_json(path, {"settings": current, "environment": common.environment()})


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command", choices=("baselines", "runs", "horizon", "shipped", "decayed", "added")
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    parser.add_argument(
        "--checkpoints",
        choices=("selected", "final", "both"),
        default="both",
        help="runs: which checkpoints of each finished run (default both, selected ones first)",
    )
    parser.add_argument(
        "--stack",
        action="store_true",
        help="runs/horizon/added: tune each architecture's checkpoints together per cell (GPUs)",
    )
    parser.add_argument(
        "--stack-max",
        type=int,
        default=6,
        metavar="N",
        help="with --stack: at most N checkpoints together (memory, a command's time limit)",
    )
    parser.add_argument(
        "--task",
        action="append",
        metavar="NAME",
        help="only the cells of this held-out task (repeatable; default: every task)",
    )
    parser.add_argument(
        "--run",
        action="append",
        metavar="ARM/sSEED",
        help="runs/decayed: this main run (e.g. pes_celo2/s1); horizon: this checkpoint (pes/s0)",
    )
    parser.add_argument(
        "--decayed",
        action="store_true",
        help="shipped: with item 4's decayed schedule, into shipped_decayed/ (decision_rule.md)",
    )
    parser.add_argument(
        "--optimizer",
        action="append",
        metavar="NAME",
        help="shipped: only this shipped optimizer (repeatable; default: every one)",
    )
    parser.add_argument(
        "--resumable",
        action="store_true",
        help="keep each value of a cell as it finishes (elo.TuningCache under runs/tuning_cache) "
        "so that a stopped driver resumes within the cell: for cells longer than a session",
    )
    args = parser.parse_args()
    global TUNING_CACHE_ROOT
    if args.resumable:
        TUNING_CACHE_ROOT = HERE / "runs" / "tuning_cache"
    only = args.task
    if args.optimizer is not None and args.command != "shipped":
        parser.error("--optimizer applies to `shipped` only")
    if args.decayed and args.command != "shipped":
        parser.error("--decayed applies to `shipped` only (`decayed` is the Celo2 main runs')")
    if args.run is not None and args.command not in ("runs", "decayed", "horizon"):
        parser.error("--run applies to `runs`, `decayed` and `horizon` only")
    if args.stack and args.command not in ("runs", "horizon", "added"):
        parser.error("--stack applies to `runs`, `horizon` and `added` only")
    if only is not None and args.command == "added":
        parser.error("--task does not apply to `added`: item 1 decides its one cell")
    if args.stack_max < 1:
        parser.error(f"--stack-max must be a positive integer, got {args.stack_max}")
    stack = args.stack_max if args.stack else 0
    if only is not None:
        cells(only)  # an unknown name stops here, before anything is written
    if args.optimizer is not None:
        shipped_to_tune(args.optimizer)  # likewise
    results = Path(args.results_dir)
    out = results / "evaluation"
    check_settings(out)
    # float32 matrix products on every device (an accelerator's default may be TF32).
    with jax.default_matmul_precision("highest"):
        if args.command == "baselines":
            run_baselines(out, only)
        elif args.command == "runs":
            which = {"selected": ("best",), "final": ("final",), "both": ("best", "final")}
            run_learned(out, results, only, stack, which[args.checkpoints], args.run)
        elif args.command == "shipped":
            run_shipped(out, only, args.optimizer, args.decayed)
        elif args.command == "decayed":
            run_decayed(out, results, only, args.run)
        elif args.command == "added":
            run_added(out, results, stack)
        else:
            run_long_horizon(out, only, stack, args.run)


if __name__ == "__main__":
    main()
