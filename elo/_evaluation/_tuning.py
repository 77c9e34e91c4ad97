"""Tuning: a step size swept on a grid (extended past an end where the choice lies) and chosen
on the validation split; comparisons with tuned AdamW."""

import abc
import hashlib
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array

from .._checks import is_int_at_least
from ..optimizers._base import AbstractLearnedOptimizer
from ..tasks import AbstractTask
from ..tasks._fingerprint import task_label
from ._baselines import BASELINES, check_schedule_shape, ScheduledBaseline, ScheduleShape
from ._evaluate import (
    _check_run_args,
    _finite_or_none,
    _Learned,
    _resolve_task,
    _result,
    _seed_keys,
    _train,
    Evaluation,
    log_grid,
    Selection,
    selection_score,
)


SWEEP_RANGES: dict[str, tuple[float, float]] = {
    "adamw": (1e-4, 1e-1),
    "adam": (1e-4, 1e-1),
    "muon": (1e-3, 1.0),
    "sgd": (1e-3, 1.0),
    "learned": (0.1, 10.0),
}
"""The default sweep of each baseline's (peak) learning rate (three decades), and of a learned
optimizer's `learning_rate` multiplier (`"learned"`, two decades around its default 1),
log-spaced (see [`elo.log_grid`][])."""

REFERENCE = "adamw"
COMPARISON_FORMAT = "elo-comparison"


Edge = Literal["low", "high"]


class Tuned(eqx.Module):
    """An optimizer tuned on a task: one run per swept value, the chosen one selected by a
    split's final loss (the validation split's by default). The result of [`elo.tune`][] (one
    per optimizer: [`elo.tune_many`][]).

    **Attributes:**

    - `name`: the optimizer's label.
    - `hyperparameter`: `"learning_rate"` (a baseline's rate: the peak of its schedule) or
      `"learning_rate_multiplier"` (a learned optimizer's, see [`elo.as_optax`][]).
    - `values`: the swept values, in grid order: the values added below the grid's first
      value, the grid, then those added above its last.
    - `sweep`: one [`elo.Evaluation`][] per value.
    - `selected`: the index of the chosen value: the lowest final `select` loss (mean over
      seeds) among the values that did not diverge ([`elo.Evaluation.diverged`][]); 0 when
      every value diverged.
    - `extended`: for each value, whether it was added past an end of the grid (see
      `extend_edges`).
    - `extend_edges`: the most values that could be added past each end of the grid (the
      argument of [`elo.tune`][]; 0: the grid alone).
    - `schedule`: a baseline's learning-rate schedule, `"warmup_cosine"` or `"constant"`;
      `None` for a learned optimizer (its own step schedule).
    - `select`: the loss the choice minimises: `"validation_loss"` (the default of
      [`elo.tune`][]), `"train_loss"` or `"test_loss"`.
    """

    name: str
    hyperparameter: str
    values: tuple[float, ...]
    sweep: tuple[Evaluation, ...]
    selected: int
    extended: tuple[bool, ...]
    extend_edges: int
    schedule: ScheduleShape | None
    select: Selection

    def __check_init__(self):
        if not (len(self.values) == len(self.sweep) == len(self.extended)):
            raise ValueError(
                f"Tuned has {len(self.values)} values, {len(self.sweep)} evaluations and "
                f"{len(self.extended)} extension flags; give one of each per swept value."
            )

    @property
    def best(self) -> Evaluation:
        """The chosen value's evaluation."""
        return self.sweep[self.selected]

    @property
    def value(self) -> float:
        """The chosen value."""
        return self.values[self.selected]

    @property
    def diverged(self) -> tuple[bool, ...]:
        """Whether the run of each value diverged."""
        return tuple(r.diverged() for r in self.sweep)

    @property
    def worse_than_untrained(self) -> tuple[bool, ...]:
        """Whether the run of each value ended worse than not training
        ([`elo.Evaluation.worse_than_untrained`][])."""
        return tuple(r.worse_than_untrained() for r in self.sweep)

    @property
    def at_edge(self) -> Edge | None:
        """Whether the chosen value is at an end of the swept values, after any extension:
        `"low"` when it is the lowest, `"high"` when it is the highest (the best value may lie
        beyond it), `None` when it is interior or only one value was swept."""
        low, high = min(self.values), max(self.values)
        if low == high:
            return None
        if self.value == low:
            return "low"
        if self.value == high:
            return "high"
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary: the sweep (value, whether it was added past an end of
        the grid, validation score, divergence, whether it ended worse than not training, final
        and best values of each run), whether the choice is at an end of the swept values
        (`at_edge`), and the chosen run's full evaluation."""
        sweep = []
        for value, extended, result in zip(self.values, self.extended, self.sweep):
            summary = result.to_dict()
            sweep.append(
                {
                    "value": value,
                    "extended": extended,
                    "score": _finite_or_none(selection_score(result, self.select)),
                    "diverged": summary["diverged"],
                    "worse_than_untrained": summary["worse_than_untrained"],
                    "final": summary["final"],
                    "best": summary["best"],
                }
            )
        return {
            "name": self.name,
            "hyperparameter": self.hyperparameter,
            "schedule": self.schedule,
            "select": self.select,
            "values": list(self.values),
            "extend_edges": self.extend_edges,
            "extended": list(self.extended),
            "selected_value": self.value,
            "at_edge": self.at_edge,
            "final_test_loss": _finite_or_none(self.best.final("test_loss")[0]),
            "best_test_loss": _finite_or_none(self.best.best("test_loss")[0]),
            "diverged": list(self.diverged),
            "worse_than_untrained": list(self.worse_than_untrained),
            "sweep": sweep,
            "evaluation": self.best.to_dict(),
        }


def _grid_values(values: Any, num_values: Any, grid: str) -> list[float]:
    """The swept values: `values` checked, else `num_values` log-spaced over the grid's range."""
    if values is None:
        if not is_int_at_least(num_values, 1):
            raise ValueError(f"num_values must be a positive integer, got {num_values!r}.")
        values = log_grid(*SWEEP_RANGES[grid], num_values)
    return _check_values(values, "values")


def _labels(optimizers: Sequence[Any], names: Sequence[str] | None) -> list[str]:
    """One label per optimizer: `names`, else a baseline's name or the optimizer's class."""
    if names is None:
        return [o if isinstance(o, str) else type(o).__name__ for o in optimizers]
    labels = list(names)
    if len(labels) != len(optimizers):
        raise ValueError(
            f"names has {len(labels)} labels for {len(optimizers)} optimizers; give one each."
        )
    return labels


def _check_values(values: Any, field: str) -> list[float]:
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError):
        floats = []
    if not floats or not all(math.isfinite(v) and v > 0 for v in floats):
        raise ValueError(
            f"{field} must be a non-empty list of positive numbers, got {values!r}; pass e.g. "
            "elo.log_grid(1e-4, 1e-1, 7)."
        )
    return floats


def _check_extension(extend_edges: Any, grid_values: list[float]) -> int:
    """`extend_edges`, checked against the grid whose ends it extends."""
    if not is_int_at_least(extend_edges, 0):
        raise ValueError(
            "extend_edges must be a non-negative integer (the most values added past each end "
            f"of the grid), got {extend_edges!r}."
        )
    if extend_edges > 0 and len(grid_values) < 2:
        raise ValueError(
            f"extend_edges={extend_edges} needs at least two values, whose spacing the added "
            f"values continue; got {grid_values}. Sweep more values (num_values), or pass "
            "extend_edges=0."
        )
    if extend_edges > 0 and any(a >= b for a, b in zip(grid_values, grid_values[1:])):
        raise ValueError(
            f"extend_edges={extend_edges} adds values past the first and last values of the "
            f"grid, which must be in increasing order; got {grid_values}. Sort them, or pass "
            "extend_edges=0."
        )
    return extend_edges


class AbstractTuningCache(eqx.Module):
    """Where [`elo.tune`][] keeps each value's evaluation as soon as it is made, so that a
    tuning stopped part-way (a killed process, a machine taken back) resumes with the values it
    had not finished. [`elo.TuningCache`][] keeps them in a directory.

    `key` says what the evaluation was made with (optimizer, task, steps, seeds, ...): a value
    stored under another key is not this tuning's, and a cache refuses it.
    """

    @abc.abstractmethod
    def load(self, key: Mapping[str, Any], value: float) -> Evaluation | None:
        """The evaluation stored for `value` under `key`; None when there is none."""

    @abc.abstractmethod
    def save(self, key: Mapping[str, Any], value: float, result: Evaluation) -> None:
        """Store `result`, the evaluation of `value` under `key`."""


def _optimizer_identity(optimizer: AbstractLearnedOptimizer | str) -> str:
    """A baseline's name, or a learned optimizer's class with a digest of its structure
    (hyperparameters included) and weights."""
    if isinstance(optimizer, str):
        return optimizer
    digest = hashlib.sha256(str(jax.tree.structure(optimizer)).encode())
    for leaf in jax.tree.leaves(eqx.filter(optimizer, eqx.is_array)):
        digest.update(np.asarray(leaf).tobytes())
    return f"{type(optimizer).__name__}@{digest.hexdigest()[:16]}"


def tune(
    optimizer: AbstractLearnedOptimizer | str,
    task: AbstractTask | str,
    *,
    num_steps: int,
    num_values: int = 7,
    values: Sequence[float] | None = None,
    extend_edges: int = 0,
    schedule: ScheduleShape = "warmup_cosine",
    select: Selection = "validation_loss",
    seeds: int | Sequence[int] = 1,
    eval_every: int | None = None,
    name: str | None = None,
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
    cache: AbstractTuningCache | None = None,
) -> Tuned:
    """Tune an optimizer's step size on a task, choosing on the validation split.

    A baseline of [`elo.BASELINES`][] (`"adamw"`, `"adam"`, `"sgd"`, `"muon"`) runs with
    `schedule` over `num_steps` and its (peak) learning rate is swept; a learned optimizer runs
    as `elo.as_optax(lo, num_steps=num_steps)` and its `learning_rate` multiplier is swept.
    Every value and seed trains in one compiled program (`jax.vmap` over both). The chosen
    value has the lowest final **validation** loss (mean over seeds) among those that did not
    diverge; the test split is never looked at, so the chosen run's test numbers stay held out.

    A choice at an end of the grid may be the grid's fault rather than the optimizer's. With
    `extend_edges`, while the choice is the lowest (highest) value, the next value below
    (above) it is swept too, at the grid's own log spacing there (the ratio of its two
    outermost values at that end), with the same seeds, and the choice is made again, at most
    `extend_edges` times per end. A diverged value is never the choice, so it never stops an
    extension; when every value diverges the choice is the lowest, and the grid grows
    downwards. A choice still at an end is marked: [`elo.Tuned.at_edge`][]. The added values
    share one compiled program (one value at a time), compiled once.

    **Arguments:**

    - `optimizer`: a tuned baseline's name or a learned optimizer.
    - `task`: a task or its name.
    - `num_steps`: the number of training steps.
    - `num_values`: the size of the default grid: log-spaced over `elo.SWEEP_RANGES` (peak
      learning rates $10^{-4}$ to $10^{-1}$ for AdamW, $10^{-3}$ to 1 for Muon and SGD;
      multipliers 0.1 to 10 for a learned optimizer).
    - `values`: the grid itself, instead.
    - `extend_edges`: the most values added past each end of the grid (default 0: the grid
      alone). Needs a grid of at least two values, in increasing order.
    - `schedule`: a baseline's learning-rate schedule: `"warmup_cosine"` (the default:
      [`elo.warmup_cosine`][], the rate swept is its peak) or `"constant"`. A learned
      optimizer follows its own step schedule and takes only the default.
    - `select`: the loss whose final value (mean over seeds) the choice minimises:
      `"validation_loss"` (the default), `"train_loss"`, or `"test_loss"` (as papers that
      report the best test curve do; the test numbers are then no longer held out).
    - `seeds`, `eval_every`, `batch_size`, `data_dir`: as for [`elo.evaluate`][].
    - `name`: a label (default: the baseline's name or the learned optimizer's class).
    - `cache`: keep each value's evaluation as soon as it is made (e.g.
      [`elo.TuningCache`][]`("tuning/adamw")`) and take those already there: a tuning stopped
      part-way and run again with the same arguments trains only the values it had not
      finished. The values then train one at a time, in one compiled program (like the added
      ones), so a stop loses at most one value's runs. The runs are those of a tuning without
      it up to float32 rounding (values trained in a batch or alone are summed in different
      orders), which can change the choice only between values that are all but tied.

    **Returns:**

    A [`elo.Tuned`][].

    !!! example

        ```python
        adamw = elo.tune(
            "adamw", "mlp-w128-d3_fashionmnist-8x8x1", num_steps=1000, seeds=3, extend_edges=3
        )
        print(adamw.value, adamw.at_edge, adamw.best.final("test_loss"))
        ```
    """
    eval_every, seed_values = _check_run_args(num_steps, eval_every, seeds)
    check_schedule_shape(schedule)
    _check_select(select)
    make: Callable[[Any], optax.GradientTransformation]
    if isinstance(optimizer, AbstractLearnedOptimizer):
        if schedule != "warmup_cosine":
            raise ValueError(
                f"schedule={schedule!r} applies to baselines: a learned optimizer follows its "
                "own step schedule (see elo.as_optax); leave schedule out."
            )
        make, grid = _Learned(optimizer, num_steps), "learned"
        hyperparameter, label, shape = "learning_rate_multiplier", type(optimizer).__name__, None
    elif isinstance(optimizer, str) and optimizer in BASELINES:
        make, grid = ScheduledBaseline(optimizer, num_steps, schedule), optimizer
        hyperparameter, label, shape = "learning_rate", optimizer, schedule
    else:
        raise ValueError(
            f"Cannot tune {optimizer!r}: pass a learned optimizer or a hand-designed baseline's "
            f"name: {', '.join(BASELINES)}."
        )
    grid_values = _grid_values(values, num_values, grid)
    extend_edges = _check_extension(extend_edges, grid_values)
    task = _resolve_task(task, batch_size, data_dir)
    keys = _seed_keys(seed_values)
    label = label if name is None else name
    run = (task, num_steps, eval_every, seed_values)
    if cache is None:
        losses, measured = _train(
            task, make, jnp.asarray(grid_values, jnp.float32), keys, num_steps, eval_every, True
        )
        tuned = _tuned(
            label,
            hyperparameter,
            grid_values,
            run,
            losses,
            measured,
            extend_edges=extend_edges,
            schedule=shape,
            select=select,
        )
        return _extend(tuned, run, make, keys)
    if not isinstance(cache, AbstractTuningCache):
        raise TypeError(
            f"cache must be an elo.TuningCache (or another elo.AbstractTuningCache), got "
            f"{type(cache).__name__}."
        )
    key = {
        "name": label,
        "optimizer": _optimizer_identity(optimizer),
        "hyperparameter": hyperparameter,
        "schedule": shape,
        "task": task_label(task),
        "num_steps": num_steps,
        "eval_every": eval_every,
        "seeds": list(seed_values),
    }
    one_value = _CachedValue(cache, key, label, hyperparameter, run, make, keys)
    sweep = tuple(one_value(v) for v in grid_values)
    tuned = _tuned_from_sweep(
        label,
        hyperparameter,
        grid_values,
        sweep,
        extend_edges=extend_edges,
        schedule=shape,
        select=select,
    )
    return _extend(tuned, run, make, keys, one_value)


class _CachedValue:
    """One value's evaluation from the cache, else trained alone and stored."""

    def __init__(self, cache, key, label, hyperparameter, run, make, keys):
        self.cache, self.key, self.label, self.hyperparameter = cache, key, label, hyperparameter
        self.run, self.make, self.keys = run, make, keys

    def __call__(self, value: float) -> Evaluation:
        found = self.cache.load(self.key, value)
        if found is not None:
            return found
        result = _train_one_value(
            self.label, self.hyperparameter, value, self.run, self.make, self.keys
        )
        self.cache.save(self.key, value, result)
        # What a resumed tuning reads back: the same numbers whether or not it was stopped.
        return Evaluation.from_dict(result.to_dict())


def _train_one_value(label, hyperparameter, value, run, make, keys) -> Evaluation:
    """`value`'s runs on their own: one value keeps one shape, so every value of a tuning (and
    every value added past an end) reuses one compiled program."""
    task, num_steps, eval_every, _ = run
    losses, measured = _train(
        task, make, jnp.asarray([value], jnp.float32), keys, num_steps, eval_every, True
    )
    losses, measured = jax.device_get((losses, measured))
    return _evaluation(label, hyperparameter, value, run, losses[0], measured[0])


def _check_select(select: Any) -> None:
    if select not in ("train_loss", "validation_loss", "test_loss"):
        raise ValueError(
            f"select must be 'train_loss', 'validation_loss' or 'test_loss', got {select!r}."
        )


def _tuned(
    label: str,
    hyperparameter: str,
    grid_values: list[float],
    run: tuple[AbstractTask, int, int, tuple[int, ...]],
    losses: Any,
    measured: Any,
    *,
    extend_edges: int,
    schedule: ScheduleShape | None,
    select: Selection,
) -> Tuned:
    """A `Tuned` from the swept runs' curves (leading axis: the values), chosen by `select`."""
    losses, measured = jax.device_get((losses, measured))
    sweep = tuple(
        _evaluation(label, hyperparameter, v, run, losses[i], measured[i])
        for i, v in enumerate(grid_values)
    )
    return _tuned_from_sweep(
        label,
        hyperparameter,
        grid_values,
        sweep,
        extend_edges=extend_edges,
        schedule=schedule,
        select=select,
    )


def _tuned_from_sweep(
    label: str,
    hyperparameter: str,
    grid_values: list[float],
    sweep: tuple[Evaluation, ...],
    *,
    extend_edges: int,
    schedule: ScheduleShape | None,
    select: Selection,
) -> Tuned:
    """A `Tuned` of the grid's evaluations (none added yet), chosen by `select`."""
    return Tuned(
        name=label,
        hyperparameter=hyperparameter,
        values=tuple(grid_values),
        sweep=sweep,
        selected=_select(sweep, select),
        extended=(False,) * len(sweep),
        extend_edges=extend_edges,
        schedule=schedule,
        select=select,
    )


def _evaluation(
    label: str,
    hyperparameter: str,
    value: float,
    run: tuple[AbstractTask, int, int, tuple[int, ...]],
    losses: Any,
    measured: Any,
) -> Evaluation:
    task, num_steps, eval_every, seed_values = run
    learning_rate = value if hyperparameter == "learning_rate" else None
    return _result(label, task, num_steps, eval_every, seed_values, learning_rate, losses, measured)


def _select(sweep: Sequence[Evaluation], select: Selection) -> int:
    """The index of the lowest final `select` loss among the runs that did not diverge."""
    scores = [math.inf if r.diverged() else selection_score(r, select) for r in sweep]
    return int(np.argmin(scores))


def _extend(
    tuned: Tuned,
    run: tuple[AbstractTask, int, int, tuple[int, ...]],
    make: Callable[[Any], optax.GradientTransformation],
    keys: Any,
    one_value: Callable[[float], Evaluation] | None = None,
) -> Tuned:
    """`tuned` with values added past the end of the swept values where its choice lies, one
    at a time (each run with `make` on the same seeds, or `one_value`) and the choice made
    again, until it is interior or `tuned.extend_edges` values were added past that end."""
    added = {"low": 0, "high": 0}
    while (edge := tuned.at_edge) is not None and added[edge] < tuned.extend_edges:
        values = tuned.values
        if edge == "low":
            value = values[0] * (values[0] / values[1])
        else:
            value = values[-1] * (values[-1] / values[-2])
        if one_value is None:
            result = _train_one_value(tuned.name, tuned.hyperparameter, value, run, make, keys)
        else:
            result = one_value(value)
        if edge == "low":
            values, sweep = (value, *values), (result, *tuned.sweep)
            extended = (True, *tuned.extended)
        else:
            values, sweep = (*values, value), (*tuned.sweep, result)
            extended = (*tuned.extended, True)
        tuned = eqx.tree_at(
            lambda t: (t.values, t.sweep, t.selected, t.extended),
            tuned,
            (values, sweep, _select(sweep, tuned.select), extended),
        )
        added[edge] += 1
    return tuned


def tune_many(
    optimizers: Sequence[AbstractLearnedOptimizer],
    task: AbstractTask | str,
    *,
    num_steps: int,
    num_values: int = 7,
    values: Sequence[float] | None = None,
    extend_edges: int = 0,
    seeds: int | Sequence[int] = 1,
    eval_every: int | None = None,
    names: Sequence[str] | None = None,
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
) -> tuple[Tuned, ...]:
    """Tune several learned optimizers of one architecture on a task in one compiled program.

    The same as [`elo.tune`][] on each optimizer in turn (the same grid, seeds, extension of
    the grid's ends and choice on the validation split; equal up to float rounding), but the
    optimizers' weights are stacked and `jax.vmap`ped over alongside the values and seeds, so
    an accelerator trains `len(optimizers) * len(values) * seeds` runs at once where
    `elo.tune` would leave it mostly idle. (Compilation is shared either way: `elo.tune` on
    checkpoints of one architecture reuses its compiled program.) On a CPU, whose cores the
    vmapped values and seeds already keep busy, expect little gain; every optimizer's runs are
    held in memory together. Values added past the grid's ends (`extend_edges`) differ from
    optimizer to optimizer and are run one optimizer at a time, as `elo.tune` runs them.

    **Arguments:**

    - `optimizers`: learned optimizers that differ only in their weights: the same class, the
      same hyperparameters and the same array shapes (e.g. checkpoints of meta-training runs
      of one preset).
    - `task`, `num_steps`, `num_values`, `values`, `extend_edges`, `seeds`, `eval_every`,
      `batch_size`, `data_dir`: as for [`elo.tune`][].
    - `names`: labels, one per optimizer (default: the class name).

    **Returns:**

    One [`elo.Tuned`][] per optimizer, in order.

    !!! example

        ```python
        los = [elo.load_optimizer(f"runs/s{seed}") for seed in range(3)]
        tuned = elo.tune_many(los, "mlp-w128-d3_fashionmnist-8x8x1", num_steps=1000, seeds=3)
        print([t.value for t in tuned])
        ```
    """
    eval_every, seed_values = _check_run_args(num_steps, eval_every, seeds)
    optimizers = list(optimizers)
    stacked, skeleton = _stack_optimizers(optimizers)
    labels = _labels(optimizers, names)
    grid_values = _grid_values(values, num_values, "learned")
    extend_edges = _check_extension(extend_edges, grid_values)
    task = _resolve_task(task, batch_size, data_dir)
    keys = _seed_keys(seed_values)
    losses, measured = _train_stacked(
        task,
        stacked,
        skeleton,
        jnp.asarray(grid_values, jnp.float32),
        keys,
        num_steps,
        eval_every,
    )
    losses, measured = jax.device_get((losses, measured))  # one transfer for every optimizer
    run = (task, num_steps, eval_every, seed_values)
    return tuple(
        _extend(
            _tuned(
                label,
                "learning_rate_multiplier",
                grid_values,
                run,
                losses[i],
                measured[i],
                extend_edges=extend_edges,
                schedule=None,
                select="validation_loss",
            ),
            run,
            _Learned(optimizer, num_steps),
            keys,
        )
        for i, (optimizer, label) in enumerate(zip(optimizers, labels))
    )


def _stack_optimizers(
    optimizers: list[AbstractLearnedOptimizer],
) -> tuple[AbstractLearnedOptimizer, AbstractLearnedOptimizer]:
    """(the optimizers' arrays stacked on a new leading axis, the rest of them), refusing
    optimizers that differ in anything but their weights."""
    if not optimizers:
        raise ValueError("tune_many takes a non-empty list of learned optimizers, got none.")
    for i, o in enumerate(optimizers):
        if not isinstance(o, AbstractLearnedOptimizer):
            raise ValueError(
                f"tune_many takes a non-empty list of learned optimizers; optimizers[{i}] is a "
                f"{type(o).__name__}. Tune a baseline by name with elo.tune."
            )
    parts = [eqx.partition(o, eqx.is_array) for o in optimizers]
    first_arrays, skeleton = parts[0]
    shapes = [(x.shape, x.dtype) for x in jax.tree.leaves(first_arrays)]
    for i, (arrays, rest) in enumerate(parts[1:], start=1):
        same = jax.tree.structure(arrays) == jax.tree.structure(first_arrays) and shapes == [
            (x.shape, x.dtype) for x in jax.tree.leaves(arrays)
        ]
        if not (same and eqx.tree_equal(rest, skeleton)):
            raise ValueError(
                f"optimizers[{i}] ({type(optimizers[i]).__name__}) differs from optimizers[0] "
                f"({type(optimizers[0]).__name__}) in more than its weights (class, "
                "hyperparameters or shapes); tune_many needs one architecture: call it once per "
                "architecture, or use elo.tune."
            )
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *(arrays for arrays, _ in parts))
    return stacked, skeleton


@eqx.filter_jit
def _train_stacked(
    task: AbstractTask,
    stacked: AbstractLearnedOptimizer,
    skeleton: AbstractLearnedOptimizer,
    values: Array,
    keys: Any,
    num_steps: int,
    eval_every: int,
):
    def one(arrays):
        make = _Learned(eqx.combine(arrays, skeleton), num_steps)
        return _train(task, make, values, keys, num_steps, eval_every, True)

    return jax.vmap(one)(stacked)


def steps_to_target(result: Evaluation, target: float) -> int | None:
    """The first evaluation point at which the test loss (mean over seeds) is at most `target`.

    **Arguments:**

    - `result`: an evaluation.
    - `target`: a test loss.

    **Returns:**

    A step of `result.steps`, or `None` if the run never gets there (or `target` is not finite).
    The resolution is the evaluation interval.
    """
    if not math.isfinite(target):
        return None
    mean = np.mean(np.asarray(result.test_loss, np.float64), axis=0)
    reached = np.flatnonzero(np.isfinite(mean) & (mean <= target))
    return int(result.steps[reached[0]]) if reached.size else None


class Comparison(eqx.Module):
    """Optimizers tuned on one task and compared with tuned AdamW. The result of
    [`elo.compare`][].

    **Attributes:**

    - `task`: the task's name.
    - `tuned`: one [`elo.Tuned`][] per optimizer, tuned AdamW first.
    - `target_loss`: tuned AdamW's final test loss (mean over seeds).
    - `steps_to_target`: for each optimizer, the steps its chosen run needs to reach
      `target_loss` ([`elo.steps_to_target`][]; `None` when it never does).
    """

    task: str
    tuned: tuple[Tuned, ...]
    target_loss: float
    steps_to_target: tuple[int | None, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict: the settings (with `extend_edges`), the target, and each
        optimizer's [`elo.Tuned.to_dict`][] with its steps to the target."""
        first = self.tuned[0].best
        return {
            "task": self.task,
            "num_steps": first.num_steps,
            "eval_every": first.eval_every,
            "seeds": list(first.seeds),
            "select": self.tuned[0].select,
            "extend_edges": self.tuned[0].extend_edges,
            "reference": self.tuned[0].name,
            "target_test_loss": _finite_or_none(self.target_loss),
            "optimizers": [
                {**t.to_dict(), "steps_to_target": s}
                for t, s in zip(self.tuned, self.steps_to_target)
            ],
        }


def compare(
    optimizers: Sequence[AbstractLearnedOptimizer | str],
    task: AbstractTask | str,
    *,
    num_steps: int,
    num_values: int = 7,
    extend_edges: int = 3,
    seeds: int | Sequence[int] = 1,
    eval_every: int | None = None,
    names: Sequence[str] | None = None,
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
) -> Comparison:
    """Tune several optimizers on a task ([`elo.tune`][]) and measure each against tuned AdamW.

    AdamW is always tuned (added first when not given): its chosen run's final test loss is the
    target, and every optimizer is credited with the steps its own chosen run needs to reach
    it. Every choice is made on the validation split, and a choice at an end of its grid has
    the grid extended past that end (up to `extend_edges` values per end, see [`elo.tune`][]);
    one still at an end is marked ([`elo.Tuned.at_edge`][]).

    **Arguments:**

    - `optimizers`: names of [`elo.BASELINES`][] and learned optimizers.
    - `task`: a task or its name.
    - `extend_edges`: the most values added past each end of every optimizer's grid (default
      3; 0 sweeps the grids alone).
    - `num_steps`, `num_values`, `seeds`, `eval_every`, `batch_size`, `data_dir`: as for
      [`elo.tune`][].
    - `names`: labels, one per optimizer (default: the baseline's name or the learned
      optimizer's class); they must be distinct.

    **Returns:**

    A [`elo.Comparison`][].

    !!! example

        ```python
        result = elo.compare([lo, "muon", "sgd"], "mlp-w128-d3_fashionmnist-8x8x1", num_steps=1000)
        print(dict(zip([t.name for t in result.tuned], result.steps_to_target)))
        ```
    """
    optimizers = list(optimizers)
    labels = _labels(optimizers, names)
    for o in optimizers:
        if not (isinstance(o, AbstractLearnedOptimizer) or o in BASELINES):
            raise ValueError(
                f"Cannot tune {o!r}: pass learned optimizers or names among {', '.join(BASELINES)}."
            )
    where = [i for i, o in enumerate(optimizers) if isinstance(o, str) and o == REFERENCE]
    if where:
        optimizers.insert(0, optimizers.pop(where[0]))
        labels.insert(0, labels.pop(where[0]))
    else:
        optimizers.insert(0, REFERENCE)
        labels.insert(0, REFERENCE)
    if len(set(labels)) != len(labels):
        raise ValueError(f"The optimizers' names must be distinct, got {labels}; pass names=.")
    task = _resolve_task(task, batch_size, data_dir)
    tuned = tuple(
        tune(
            o,
            task,
            num_steps=num_steps,
            num_values=num_values,
            extend_edges=extend_edges,
            seeds=seeds,
            eval_every=eval_every,
            name=n,
        )
        for o, n in zip(optimizers, labels)
    )
    target = tuned[0].best.final("test_loss")[0]
    return Comparison(
        task=task.name,
        tuned=tuned,
        target_loss=target,
        steps_to_target=tuple(steps_to_target(t.best, target) for t in tuned),
    )


def lr_sweep(
    optimizer: str,
    task: AbstractTask | str,
    *,
    num_steps: int,
    learning_rates: Sequence[float] | None = None,
    seeds: int | Sequence[int] = 1,
    eval_every: int | None = None,
    select: Selection = "train_loss",
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
) -> tuple[Evaluation, list[Evaluation]]:
    """Deprecated: tune a baseline's constant learning rate with [`elo.tune`][] instead,
    `elo.tune(optimizer, task, num_steps=..., values=learning_rates, schedule="constant",
    select=select)`, whose result holds the chosen run (`.best`) and the sweep (`.sweep`).

    This is that call: every learning rate and seed trains in one compiled program, and the
    chosen rate has the lowest final `select` loss (the **train** loss by default), mean over
    seeds, among the runs that did not diverge ([`elo.Evaluation.diverged`][]).

    **Arguments:**

    - `optimizer`: a name of [`elo.BASELINES`][]: `"adamw"`, `"adam"`, `"sgd"` (momentum 0.9)
      or `"muon"`.
    - `task`: a task or its name.
    - `num_steps`: the number of training steps.
    - `learning_rates`: the grid (default: 7 values log-spaced over $[10^{-4}, 10^{-1}]$, see
      [`elo.log_grid`][]).
    - `seeds`, `eval_every`, `batch_size`, `data_dir`: as for [`elo.evaluate`][].
    - `select`: `"train_loss"`, `"validation_loss"` or `"test_loss"`.

    **Returns:**

    `(best, all_results)`: the selected [`elo.Evaluation`][] and one per learning rate, in grid
    order.
    """
    warnings.warn(
        "elo.lr_sweep is deprecated: call elo.tune(optimizer, task, num_steps=..., "
        "values=learning_rates, schedule='constant', select=...), whose result's .best and "
        ".sweep are lr_sweep's pair.",
        DeprecationWarning,
        stacklevel=2,
    )
    tuned = tune(
        optimizer,
        task,
        num_steps=num_steps,
        values=log_grid(1e-4, 1e-1, 7) if learning_rates is None else learning_rates,
        schedule="constant",
        select=select,
        seeds=seeds,
        eval_every=eval_every,
        batch_size=batch_size,
        data_dir=data_dir,
    )
    return tuned.best, list(tuned.sweep)
