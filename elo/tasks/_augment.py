"""Task augmentation by a random parameter scale (ELO reference §5.3)."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._custom_types import Params, PRNGKeyArray, PyTree, Scalar, ScalarLike
from ._base import AbstractTask


class ScaledTask(AbstractTask):
    """A task reparameterised by a scale $s > 0$: the optimizer sees $\\tilde w = w / s$.

    `init` returns $\\tilde w = w_0 / s$ and `batch_loss(w̃, batch)` evaluates the inner task at
    $s \\tilde w$, so the function is unchanged while the gradient the optimizer sees is
    $\\nabla_{\\tilde w} = s \\nabla_w$ and the parameters have scale $1/s$. A learned optimizer
    meta-trained on many scales has to be invariant to them.

    `scale` is a float32 scalar array leaf: one compiled program serves every scale, and the
    meta-trainer can `vmap` over tasks that differ only in their scale.

    **Arguments:**

    - `task`: the inner [`elo.tasks.AbstractTask`][].
    - `scale`: $s$, a positive scalar (converted to float32).
    """

    task: AbstractTask
    scale: Float[Array, ""]

    def __init__(self, task: AbstractTask, scale: ScalarLike | int):
        if isinstance(scale, (int, float)) and not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"ScaledTask.scale must be finite and positive, got {scale!r}.")
        scale = jnp.asarray(scale, jnp.float32)
        if scale.shape != ():
            raise ValueError(f"ScaledTask.scale must be a scalar, got shape {scale.shape}.")
        self.task = task
        self.scale = scale

    @property
    def name(self) -> str:
        """The inner task's name (the scale is an array leaf, not part of the name)."""
        return self.task.name

    def init(self, key: PRNGKeyArray) -> Params:
        """Draw the inner task's parameters and divide them by the scale.

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        $w_0 / s$, structured like the inner task's parameters.
        """
        return jax.tree.map(lambda w: (w / self.scale).astype(w.dtype), self.task.init(key))

    def _unscale(self, params: Params) -> Params:
        return jax.tree.map(lambda w: (w * self.scale).astype(w.dtype), params)

    def sample_batch(self, key: PRNGKeyArray) -> PyTree:
        """The inner task's batch (the scale does not change the data).

        **Arguments:**

        - `key`: passed to the inner task.

        **Returns:**

        The inner task's `sample_batch(key)`.
        """
        return self.task.sample_batch(key)

    def batch_loss(self, params: Params, batch: PyTree) -> Scalar:
        """The inner task's training loss at $s \\tilde w$ on a batch from `sample_batch`.

        **Arguments:**

        - `params`: $\\tilde w$, the scaled parameters.
        - `batch`: a value returned by `sample_batch`.

        **Returns:**

        A float32 scalar.
        """
        return self.task.batch_loss(self._unscale(params), batch)

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """The inner task's held-out loss at $s \\tilde w$.

        **Arguments:**

        - `params`: $\\tilde w$, the scaled parameters.
        - `key`: passed to the inner task.

        **Returns:**

        A float32 scalar.
        """
        return self.task.eval_loss(self._unscale(params), key)

    def normalize_loss(self, loss: Scalar) -> Scalar:
        """The inner task's normalisation (the loss values are the inner task's).

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar.
        """
        return self.task.normalize_loss(loss)


class ParameterScaleAugmentation(eqx.Module):
    """Sample log-uniform parameter scales, one per task sample, to augment tasks.

    $s = \\exp(u)$ with $u \\sim U[\\ln s_\\min, \\ln s_\\max]$: one scalar for all of a task's
    tensors (the reference's `task_aug_level="global"`, range $[10^{-3}, 10^3]$). The meta-trainer
    draws a new scale at every fresh initialisation of an inner problem and keeps it when a
    stored state is resumed.

    **Arguments:**

    - `min_scale`: $s_\\min > 0$ (default $10^{-3}$).
    - `max_scale`: $s_\\max \\ge s_\\min$ (default $10^3$).

    !!! example

        ```python
        augment = elo.tasks.ParameterScaleAugmentation()
        scaled = augment(task, key=jax.random.key(0))  # a ScaledTask
        ```
    """

    min_scale: float = eqx.field(static=True)
    max_scale: float = eqx.field(static=True)

    def __init__(self, min_scale: float | int = 1e-3, max_scale: float | int = 1e3):
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)

    def __check_init__(self):
        if not (math.isfinite(self.min_scale) and self.min_scale > 0):
            raise ValueError(
                "ParameterScaleAugmentation.min_scale must be finite and positive, "
                f"got {self.min_scale!r}."
            )
        if not (math.isfinite(self.max_scale) and self.max_scale >= self.min_scale):
            raise ValueError(
                "ParameterScaleAugmentation.max_scale must be finite and >= min_scale "
                f"({self.min_scale!r}), got {self.max_scale!r}."
            )

    def sample_scale(self, key: PRNGKeyArray) -> Scalar:
        """Draw one scale $s = \\exp(U[\\ln s_\\min, \\ln s_\\max])$.

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        A float32 scalar in $[s_\\min, s_\\max]$.
        """
        log_scale = jax.random.uniform(
            key,
            (),
            jnp.float32,
            minval=math.log(self.min_scale),
            maxval=math.log(self.max_scale),
        )
        return jnp.clip(jnp.exp(log_scale), self.min_scale, self.max_scale)

    def __call__(self, task: AbstractTask, *, key: PRNGKeyArray) -> ScaledTask:
        """Wrap `task` in a [`elo.tasks.ScaledTask`][] with a freshly sampled scale.

        **Arguments:**

        - `task`: the inner task.
        - `key`: draws the scale.

        **Returns:**

        The scaled task.
        """
        return ScaledTask(task, self.sample_scale(key))
