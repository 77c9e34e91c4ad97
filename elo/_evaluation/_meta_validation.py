"""Meta-validation: how well the learned optimizer trains on its own, away from the test tasks.

During progressive supervision the meta-trained trajectories are fused with the expert's, so
their loss (`Metrics.meta_loss`) says little about the learned optimizer alone. `validate` runs
the learned optimizer alone on a meta-training task at several parameter scales and scores it on
that task's *validation* split, which meta-training never trains on and which is not a test set:
it is the number checkpoint selection is allowed to use.
"""

import math
import os
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._checks import is_int_at_least, positive_numbers, seed_tuple
from .._custom_types import Params
from ..optimizers._base import AbstractLearnedOptimizer
from ..optimizers._optax import as_optax
from ..tasks import AbstractTask, get_task, ScaledTask
from ._training_run import split_metrics, training_run


DEFAULT_VALIDATION_TASK = "mlp-w32-d1_mnist-8x8x1"
DEFAULT_SCALES = (0.1, 1.0, 10.0)


class Validation(eqx.Module):
    """The result of [`elo.validate`][].

    **Attributes:**

    - `task`: the validation task's name.
    - `num_steps`: training steps per run.
    - `scales`: the parameter scales $s$ (the optimizer sees $w/s$; see
      [`elo.tasks.ScaledTask`][]).
    - `seeds`: the seeds of the runs (initialisation and minibatches).
    - `losses`: final validation loss of every run, shape `[scales, seeds]` (may be
      non-finite for a run that diverged).
    - `score`: the mean over runs of the loss normalised as in meta-training (clipped to
      $[0, 1.5 \\ln 10]$ for image tasks), so that one diverged run costs a bounded amount;
      lower is better.
    """

    task: str
    num_steps: int
    scales: tuple[float, ...]
    seeds: tuple[int, ...]
    losses: np.ndarray
    score: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (non-finite losses become `None`)."""
        return {
            "task": self.task,
            "num_steps": self.num_steps,
            "scales": list(self.scales),
            "seeds": list(self.seeds),
            "losses": [
                [float(x) if math.isfinite(x) else None for x in row] for row in self.losses
            ],
            "score": self.score,
        }


def _final_loss(task: AbstractTask, params: Params) -> Float[Array, ""]:
    return split_metrics(task, params, "validation", draws=8)[0]


@eqx.filter_jit
def _run(task: AbstractTask, lo: AbstractLearnedOptimizer, scales, keys, num_steps: int):
    def one(scale, key):
        def measure(params):
            loss = _final_loss(task, jax.tree.map(lambda w: w * scale, params))
            return loss, task.normalize_loss(loss)

        _, (loss, normalized) = training_run(
            ScaledTask(task, scale),
            as_optax(lo, num_steps=num_steps),
            key,
            num_steps=num_steps,
            eval_every=num_steps,
            measure=measure,
            measure_start=False,
        )
        return loss[-1], normalized[-1]

    per_scale = jax.vmap(lambda s: jax.vmap(lambda k: one(s, k))(keys))
    return per_scale(scales)


def validate(
    lo: AbstractLearnedOptimizer,
    task: AbstractTask | str = DEFAULT_VALIDATION_TASK,
    *,
    num_steps: int = 2000,
    scales: Sequence[float] = DEFAULT_SCALES,
    seeds: int | Sequence[int] = 2,
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
) -> Validation:
    """Score a learned optimizer *alone* on a meta-validation problem.

    Trains the task from scratch with the learned optimizer alone (no expert, no fusion, told
    the run length), once per parameter scale and seed, all in one compiled program (the
    training program of [`elo.evaluate`][], with every minibatch drawn before the loop), and
    measures the final loss on the task's validation split (for image tasks: the 20% of the
    training images that inner problems never sample). The runs are deterministic: the same
    optimizer gets the same score.

    **Arguments:**

    - `lo`: the learned optimizer (e.g. `state.learned_optimizer`).
    - `task`: a task or its name (default `"mlp-w32-d1_mnist-8x8x1"`, a meta-training task; do
      not validate on a task you report test results for).
    - `num_steps`: training steps per run.
    - `scales`: parameter scales to train at (meta-training augments over them).
    - `seeds`: a number of seeds `K` (seeds `0..K-1`) or a list of seeds.
    - `batch_size`, `data_dir`: used when `task` is a name.

    **Returns:**

    A [`elo.Validation`][]; its `score` (lower is better) is what checkpoint selection uses.

    !!! example

        ```python
        result = elo.validate(state.learned_optimizer, num_steps=1000)
        print(result.score, result.losses)
        ```
    """
    if not isinstance(lo, AbstractLearnedOptimizer):
        raise TypeError(f"`lo` must be a learned optimizer, got {type(lo).__name__}.")
    if not is_int_at_least(num_steps, 1):
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}.")
    checked = positive_numbers(list(scales) if isinstance(scales, tuple | list) else scales)
    if checked is None:
        raise ValueError(f"scales must be a non-empty list of positive numbers, got {scales}.")
    scales = checked
    seeds = seed_tuple(seeds)
    if isinstance(task, str):
        task = get_task(task, batch_size=batch_size, data_dir=data_dir)
    elif not isinstance(task, AbstractTask):
        raise TypeError(f"`task` must be a task name or an AbstractTask, got {type(task)}.")
    keys = jnp.stack([jr.key(s) for s in seeds])
    losses, normalized = _run(task, lo, jnp.asarray(scales, jnp.float32), keys, num_steps)
    losses, normalized = jax.device_get((losses, normalized))
    return Validation(
        task=task.name,
        num_steps=num_steps,
        scales=scales,
        seeds=seeds,
        losses=np.asarray(losses, np.float64),
        score=float(np.mean(normalized)),
    )
