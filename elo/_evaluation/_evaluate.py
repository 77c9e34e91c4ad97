"""Evaluate optimizers on held-out tasks: `elo.evaluate`, `elo.Evaluation`."""

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
from jaxtyping import Array, Float, Int, Key

from .._checks import is_int_at_least, seed_tuple
from .._custom_types import Params, Scalar
from ..optimizers._base import AbstractLearnedOptimizer
from ..optimizers._optax import as_optax
from ..tasks import AbstractTask, get_task
from ._baselines import BASELINES, ScheduledBaseline
from ._training_run import split_metrics, training_run


EVALUATION_FORMAT = "elo-evaluation"
METRICS = (
    "train_loss",
    "train_accuracy",
    "validation_loss",
    "validation_accuracy",
    "test_loss",
    "test_accuracy",
)
"""The quantities measured at every evaluation point, over whole splits."""

DEFAULT_LEARNING_RATES = {"adamw": 1e-3, "adam": 1e-3, "sgd": 1e-1, "muon": 2e-2}


def log_grid(low: float, high: float, num: int) -> list[float]:
    """`num` learning rates spaced evenly in log scale from `low` to `high` (inclusive).

    **Arguments:**

    - `low`, `high`: the ends, `0 < low <= high`.
    - `num`: the number of values (at least 1; 1 gives `[low]`).

    **Returns:**

    A list of floats.
    """
    if not (0 < low <= high) or num < 1:
        raise ValueError(f"log_grid needs 0 < low <= high and num >= 1; got {low}, {high}, {num}.")
    if num == 1:
        return [float(low)]
    return [float(x) for x in np.logspace(math.log10(low), math.log10(high), num)]


class Evaluation(eqx.Module):
    """The result of training a task with an optimizer, for one or several seeds.

    Arrays are host (numpy) arrays with a leading seed axis. The per-step training loss is the
    minibatch loss before each update (what the optimizer saw); the other curves are measured
    over whole splits at the evaluation points `steps` (0, `eval_every`, ..., `num_steps`).
    Tasks without whole splits (e.g. [`elo.tasks.QuadraticTask`][]) report losses on fixed
    minibatches (the validation and test curves are both `eval_loss`) and no accuracy (NaN).

    **Attributes:**

    - `name`: a label for the optimizer (e.g. `"adamw"`, a run directory).
    - `task`: the task's name.
    - `num_steps`: the number of training steps.
    - `eval_every`: steps between evaluation points.
    - `seeds`: the seeds; seed $s$ draws the initial parameters and the minibatches from
      `jax.random.key(s)`.
    - `learning_rate`: a baseline's learning rate (constant, or its schedule's peak when
      tuned by [`elo.tune`][]; `None` for a learned optimizer).
    - `steps`: `Int[np.ndarray, "evals"]`, the evaluation points.
    - `minibatch_loss`: `Float[np.ndarray, "seeds num_steps"]`.
    - `train_loss`, `train_accuracy`, `validation_loss`, `validation_accuracy`, `test_loss`,
      `test_accuracy`: `Float[np.ndarray, "seeds evals"]`, over the whole train, validation
      and test splits. Tuning looks at the validation split only (see [`elo.tune`][]); an
      evaluation file written before the validation curves existed reads them as NaN.
    """

    name: str
    task: str
    num_steps: int
    eval_every: int
    seeds: tuple[int, ...]
    learning_rate: float | None
    steps: Int[np.ndarray, " evals"]
    minibatch_loss: Float[np.ndarray, "seeds num_steps"]
    train_loss: Float[np.ndarray, "seeds evals"]
    train_accuracy: Float[np.ndarray, "seeds evals"]
    validation_loss: Float[np.ndarray, "seeds evals"]
    validation_accuracy: Float[np.ndarray, "seeds evals"]
    test_loss: Float[np.ndarray, "seeds evals"]
    test_accuracy: Float[np.ndarray, "seeds evals"]

    def final(self, metric: str) -> tuple[float, float]:
        """Mean and standard deviation over seeds of a metric at the last evaluation point.

        **Arguments:**

        - `metric`: one of `train_loss`, `train_accuracy`, `validation_loss`,
          `validation_accuracy`, `test_loss`, `test_accuracy`.

        **Returns:**

        `(mean, std)` (the population standard deviation; 0 for one seed).
        """
        return _mean_std(self._curve(metric)[:, -1])

    def diverged(self) -> bool:
        """Whether the run diverged for some seed: a minibatch or measured loss became
        non-finite, or the final validation loss is above the initial one (training made the
        model worse). A diverged value is never chosen by [`elo.tune`][]; for a run that ends
        worse than it started while finite, see [`elo.Evaluation.worse_than_untrained`][].

        **Returns:**

        A bool.
        """
        curves = [self.minibatch_loss, self.train_loss, self.validation_loss, self.test_loss]
        # A curve that is NaN throughout was not measured (a file written before validation
        # curves existed), which is not a divergence.
        measured = [c for c in curves if not np.all(np.isnan(c))]
        if not all(np.all(np.isfinite(c)) for c in measured):
            return True
        held_out = self.validation_loss if len(measured) == len(curves) else self.test_loss
        return bool(np.any(held_out[:, -1] > held_out[:, 0]))

    def worse_than_untrained(self) -> bool:
        """Whether training left the model worse than not training it, for some seed: the final
        test loss is finite and above the initial one (the untrained model's). A non-finite
        loss is not this but a divergence ([`elo.Evaluation.diverged`][]); a report that caps
        each run at its initial loss scores such a seed as if it had not trained.

        **Returns:**

        A bool.
        """
        initial, final = self.test_loss[:, 0], self.test_loss[:, -1]
        with np.errstate(invalid="ignore"):
            return bool(np.any(np.isfinite(final) & (final > initial)))

    def best(self, metric: str) -> tuple[float, float]:
        """Mean and standard deviation over seeds of a metric's best value over the evaluation
        points (the minimum of a loss, the maximum of an accuracy; non-finite values never
        count as best).

        **Arguments:**

        - `metric`: one of `train_loss`, `train_accuracy`, `validation_loss`,
          `validation_accuracy`, `test_loss`, `test_accuracy`.

        **Returns:**

        `(mean, std)`.
        """
        curve = self._curve(metric)
        if metric.endswith("accuracy"):
            per_seed = np.max(np.where(np.isfinite(curve), curve, -np.inf), axis=1)
        else:
            per_seed = np.min(np.where(np.isfinite(curve), curve, np.inf), axis=1)
        return _mean_std(per_seed)

    def _curve(self, metric: str) -> np.ndarray:
        if metric not in METRICS:
            raise ValueError(f"Unknown metric {metric!r}; expected one of {METRICS}.")
        return getattr(self, metric)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary: settings, curves (per seed and mean/std), the final
        and best values (mean/std), `diverged` and `worse_than_untrained`. Non-finite numbers
        become `None`."""
        curves = {}
        for metric in ("minibatch_loss", *METRICS):
            values = getattr(self, metric)
            # A diverged seed's infinities make NaN means, which `_jsonable` writes as None.
            with np.errstate(invalid="ignore", over="ignore"):
                mean, std = np.mean(values, axis=0), np.std(values, axis=0)
            curves[metric] = {
                "mean": _jsonable(mean),
                "std": _jsonable(std),
                "per_seed": _jsonable(values),
            }
        return {
            "name": self.name,
            "task": self.task,
            "num_steps": self.num_steps,
            "eval_every": self.eval_every,
            "seeds": list(self.seeds),
            "learning_rate": self.learning_rate,
            "steps": [int(s) for s in self.steps],
            "curves": curves,
            "final": {m: _pair(self.final(m)) for m in METRICS},
            "best": {m: _pair(self.best(m)) for m in METRICS},
            "diverged": self.diverged(),
            "worse_than_untrained": self.worse_than_untrained(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Evaluation":
        """Rebuild an evaluation from [`elo.Evaluation.to_dict`][]'s output.

        **Arguments:**

        - `data`: the dict.

        **Returns:**

        An `Evaluation`.
        """
        curves = data["curves"]

        def array(metric: str) -> np.ndarray:
            if metric not in curves:
                return np.full_like(array("test_loss"), np.nan)
            per_seed = curves[metric]["per_seed"]
            return np.asarray(
                [[np.nan if v is None else v for v in row] for row in per_seed], np.float32
            )

        return cls(
            name=data["name"],
            task=data["task"],
            num_steps=int(data["num_steps"]),
            eval_every=int(data["eval_every"]),
            seeds=tuple(int(s) for s in data["seeds"]),
            learning_rate=data.get("learning_rate"),
            steps=np.asarray(data["steps"], np.int64),
            minibatch_loss=array("minibatch_loss"),
            train_loss=array("train_loss"),
            train_accuracy=array("train_accuracy"),
            validation_loss=array("validation_loss"),
            validation_accuracy=array("validation_accuracy"),
            test_loss=array("test_loss"),
            test_accuracy=array("test_accuracy"),
        )


def _mean_std(values: Any) -> tuple[float, float]:
    values = np.asarray(values, np.float64)
    if not np.all(np.isfinite(values)):
        return math.nan, math.nan
    return float(np.mean(values)), float(np.std(values))


def _pair(pair: tuple[float, float]) -> dict[str, float | None]:
    mean, std = pair
    return {"mean": _finite_or_none(mean), "std": _finite_or_none(std)}


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _jsonable(values: Any) -> Any:
    values = np.asarray(values, np.float64)
    if values.ndim == 0:
        return _finite_or_none(float(values))
    return [_jsonable(v) for v in values]


# ------------------------------------------------------------------------------------------------
# Every run is `training_run`, vmapped over seeds (and a swept hyperparameter) and compiled once.


class _Learned(eqx.Module):
    lo: AbstractLearnedOptimizer
    num_steps: int = eqx.field(static=True)

    def __call__(self, multiplier: Scalar | None) -> optax.GradientTransformation:
        if multiplier is None:
            return as_optax(self.lo, num_steps=self.num_steps)
        return as_optax(self.lo, num_steps=self.num_steps, learning_rate=multiplier)


class _Given(eqx.Module):
    opt: optax.GradientTransformation

    def __call__(self, value: None) -> optax.GradientTransformation:
        del value
        return self.opt


def _measure(task: AbstractTask, params: Params) -> Float[Array, " 6"]:
    measured = [split_metrics(task, params, s) for s in ("train", "validation", "test")]
    return jnp.stack([x for pair in measured for x in pair])


@eqx.filter_jit
def _train(
    task: AbstractTask,
    make: Callable[[Any], optax.GradientTransformation],
    value: Any,
    keys: Key[Array, " seeds"],
    num_steps: int,
    eval_every: int,
    sweep: bool,
):
    """`make(value)` builds the optimizer; with `sweep`, `value` is an array and there is one
    run per element (vmapped)."""

    def over_seeds(value):
        def run(key):
            return training_run(
                task,
                make(value),
                key,
                num_steps=num_steps,
                eval_every=eval_every,
                measure=lambda params: _measure(task, params),
            )

        return jax.vmap(run)(keys)

    # The value is closed over rather than passed through `vmap` unless swept: it may be None.
    return jax.vmap(over_seeds)(value) if sweep else over_seeds(value)


def _eval_points(num_steps: int, eval_every: int) -> np.ndarray:
    points = list(range(0, num_steps + 1, eval_every))
    if points[-1] != num_steps:
        points.append(num_steps)
    return np.asarray(points, np.int64)


def _check_run_args(num_steps: Any, eval_every: Any, seeds: Any) -> tuple[int, tuple[int, ...]]:
    if not is_int_at_least(num_steps, 1):
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}.")
    if eval_every is None:
        eval_every = max(1, num_steps // 20)
    if not is_int_at_least(eval_every, 1):
        raise ValueError(f"eval_every must be a positive integer, got {eval_every!r}.")
    eval_every = min(eval_every, num_steps)
    seeds = seed_tuple(seeds)
    return eval_every, seeds


def _resolve_task(task: AbstractTask | str, batch_size: int, data_dir: Any) -> AbstractTask:
    if isinstance(task, str):
        return get_task(task, batch_size=batch_size, data_dir=data_dir)
    if not isinstance(task, AbstractTask):
        raise TypeError(
            f"`task` must be a task name or an AbstractTask, got {type(task).__name__}."
        )
    return task


def _seed_keys(seeds: tuple[int, ...]) -> Any:
    return jnp.stack([jr.key(s) for s in seeds])


def evaluate(
    optimizer: AbstractLearnedOptimizer | optax.GradientTransformation | str,
    task: AbstractTask | str,
    *,
    num_steps: int,
    seeds: int | Sequence[int] = 1,
    eval_every: int | None = None,
    learning_rate: float | None = None,
    name: str | None = None,
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
) -> Evaluation:
    """Train a task from scratch with an optimizer and record its learning curves.

    A learned optimizer runs alone (no expert, no fusion), as
    `elo.as_optax(lo, num_steps=num_steps)`, so its schedule knows the length of the run. The
    whole run, for every seed at once (`jax.vmap`), is one compiled program: a `jax.lax.scan`
    over chunks of `eval_every` steps, each a `jax.lax.scan` of training steps followed by an
    evaluation of the loss and accuracy over the whole train and test splits.

    **Arguments:**

    - `optimizer`: a learned optimizer (e.g. `state.learned_optimizer` or
      [`elo.load_optimizer`][]`(path)`), the name of a hand-designed one of
      [`elo.BASELINES`][]: `"adamw"`, `"adam"`, `"sgd"` (momentum 0.9), `"muon"` (at a
      constant learning rate, see `learning_rate`), or any optax transformation (e.g. with a
      schedule; it is called as `update(grads, state, params)`).
    - `task`: a task or its name (see [`elo.tasks.get_task`][]), e.g.
      `"mlp-w128-d3_fashionmnist-8x8x1"` or `"conv-c16-d2_cifar10-8x8x3"`.
    - `num_steps`: the number of training steps.
    - `seeds`: a number of seeds `K` (seeds `0..K-1`) or a list of seeds. Seed $s$ draws the
      initial parameters and every minibatch from `jax.random.key(s)`, so all optimizers see
      the same initialisations and data order.
    - `eval_every`: steps between evaluations (default `num_steps // 20`).
    - `learning_rate`: for a hand-designed optimizer (defaults: AdamW/Adam $10^{-3}$, SGD 0.1,
      Muon 0.02); must be `None` for a learned optimizer.
    - `name`: a label for the result (default: the optimizer's name or class).
    - `batch_size`, `data_dir`: used when `task` is a name.

    **Returns:**

    An [`elo.Evaluation`][].

    !!! example

        ```python
        lo = elo.load_optimizer("runs/a")
        result = elo.evaluate(lo, "mlp-w128-d3_fashionmnist-8x8x1", num_steps=1000, seeds=3)
        print(result.final("test_loss"))   # (mean, std) over seeds
        ```
    """
    eval_every, seeds = _check_run_args(num_steps, eval_every, seeds)
    task = _resolve_task(task, batch_size, data_dir)
    if isinstance(optimizer, AbstractLearnedOptimizer):
        if learning_rate is not None:
            raise ValueError("learning_rate applies to hand-designed optimizers only.")
        make, value, label = _Learned(optimizer, num_steps), None, type(optimizer).__name__
    elif isinstance(optimizer, optax.GradientTransformation):
        if learning_rate is not None:
            raise ValueError("learning_rate applies to hand-designed optimizers given by name.")
        make, value, label = _Given(optimizer), None, "optax"
    elif isinstance(optimizer, str) and optimizer in BASELINES:
        if learning_rate is None:
            learning_rate = DEFAULT_LEARNING_RATES[optimizer]
        if not (isinstance(learning_rate, int | float) and learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive number, got {learning_rate!r}.")
        learning_rate = float(learning_rate)
        make = ScheduledBaseline(optimizer, num_steps, "constant")
        value, label = jnp.float32(learning_rate), optimizer
    else:
        raise ValueError(
            f"Unknown optimizer {optimizer!r}: pass a learned optimizer or one of "
            f"{', '.join(BASELINES)}."
        )
    losses, measured = _train(task, make, value, _seed_keys(seeds), num_steps, eval_every, False)
    return _result(
        name or label, task, num_steps, eval_every, seeds, learning_rate, losses, measured
    )


def _result(name, task, num_steps, eval_every, seeds, learning_rate, losses, measured):
    losses, measured = jax.device_get((losses, measured))
    measured = np.asarray(measured, np.float32)
    return Evaluation(
        name=name,
        task=task.name,
        num_steps=num_steps,
        eval_every=eval_every,
        seeds=seeds,
        learning_rate=learning_rate,
        steps=_eval_points(num_steps, eval_every),
        minibatch_loss=np.asarray(losses, np.float32),
        **{metric: measured[..., i] for i, metric in enumerate(METRICS)},
    )


Selection = Literal["train_loss", "validation_loss", "test_loss"]


def selection_score(result: Evaluation, select: Selection) -> float:
    """The number an LR sweep minimises: the mean over seeds of the final `select` loss, or
    $+\\infty$ if any seed diverged (non-finite)."""
    mean, _ = result.final(select)
    return mean if math.isfinite(mean) else math.inf
