"""Noisy quadratic bowls: tiny, fast inner problems for tests and smoke runs."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._checks import is_int_at_least
from .._custom_types import Params, PRNGKeyArray, Scalar, ScalarLike
from ._base import AbstractTask


MAX_QUADRATIC_LOSS = 1e6
"""Losses above this value are clipped before the `log1p` of `QuadraticTask.normalize_loss`."""


class QuadraticTask(AbstractTask):
    """A quadratic bowl $\\tfrac12 (w - c)^\\top A (w - c)$ with optional gradient noise.

    $A = Q \\operatorname{diag}(\\lambda) Q^\\top$ has eigenvalues log-spaced in
    $[1, \\kappa]$ and a random rotation $Q$; the centre $c \\sim \\mathcal N(0, I)$. Both are
    drawn on the host from `seed`, so a task is reproducible. The training loss adds
    $\\sigma\\, \\varepsilon^\\top (w - c)$ with $\\varepsilon \\sim \\mathcal N(0, I)$ drawn
    from the key: like a minibatch, it leaves the expected loss unchanged and makes the gradient
    $A(w - c) + \\sigma \\varepsilon$ noisy. Parameters are `{"w": Float[Array, "dim"]}`, drawn
    from $\\mathcal N(0, I)$ by `init`.

    **Arguments:**

    - `dim`: the number of parameters (positive).
    - `seed`: selects $A$ and $c$.
    - `condition_number`: $\\kappa \\ge 1$, the ratio of the largest to the smallest eigenvalue.
    - `noise_scale`: $\\sigma \\ge 0$; an array leaf, so it can be varied without recompiling.
    """

    matrix: Float[Array, "dim dim"]
    centre: Float[Array, " dim"]
    noise_scale: Float[Array, ""]

    def __init__(
        self,
        dim: int,
        *,
        seed: int = 0,
        condition_number: float | int = 10.0,
        noise_scale: ScalarLike | int = 0.0,
    ):
        if not is_int_at_least(dim, 1):
            raise ValueError(f"QuadraticTask.dim must be a positive integer, got {dim!r}.")
        if not (math.isfinite(condition_number) and condition_number >= 1):
            raise ValueError(
                f"QuadraticTask.condition_number must be finite and >= 1, got {condition_number!r}."
            )
        if isinstance(noise_scale, (int, float)) and not (
            math.isfinite(noise_scale) and noise_scale >= 0
        ):
            raise ValueError(
                f"QuadraticTask.noise_scale must be finite and >= 0, got {noise_scale!r}."
            )
        rng = np.random.default_rng(seed)
        rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
        eigenvalues = np.logspace(0.0, math.log10(condition_number), dim)
        matrix = (rotation * eigenvalues[None, :]) @ rotation.T
        self.matrix = jnp.asarray((matrix + matrix.T) / 2, jnp.float32)
        self.centre = jnp.asarray(rng.standard_normal(dim), jnp.float32)
        self.noise_scale = jnp.asarray(noise_scale, jnp.float32)

    @property
    def dim(self) -> int:
        """The number of parameters."""
        return self.centre.shape[0]

    @property
    def name(self) -> str:
        """The registry name, `"quadratic-d{dim}"`."""
        return f"quadratic-d{self.dim}"

    def init(self, key: PRNGKeyArray) -> Params:
        """Draw $w \\sim \\mathcal N(0, I)$.

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        `{"w": Float[Array, "dim"]}`.
        """
        return {"w": jax.random.normal(key, (self.dim,), jnp.float32)}

    def _exact_loss(self, params: Params) -> Scalar:
        diff = params["w"] - self.centre
        return 0.5 * jnp.dot(diff, self.matrix @ diff)

    def sample_batch(self, key: PRNGKeyArray) -> PRNGKeyArray:
        """The key itself: `batch_loss` draws the noise $\\varepsilon$ from it.

        **Arguments:**

        - `key`: selects the noise.

        **Returns:**

        `key`.
        """
        return key

    def batch_loss(self, params: Params, batch: PRNGKeyArray) -> Scalar:
        """The quadratic plus a noise term $\\sigma\\, \\varepsilon^\\top (w - c)$ drawn from
        the key `batch`.

        **Arguments:**

        - `params`: `{"w": ...}` as returned by `init`.
        - `batch`: the key from `sample_batch`; draws $\\varepsilon$.

        **Returns:**

        A float32 scalar.
        """
        noise = jax.random.normal(batch, (self.dim,), jnp.float32)
        return self._exact_loss(params) + self.noise_scale * jnp.dot(
            noise, params["w"] - self.centre
        )

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """The noise-free quadratic (the objective the noisy losses estimate).

        **Arguments:**

        - `params`: `{"w": ...}` as returned by `init`.
        - `key`: unused (the loss is exact).

        **Returns:**

        A float32 scalar.
        """
        del key
        return self._exact_loss(params)

    def normalize_loss(self, loss: Scalar) -> Scalar:
        """$\\log(1 + \\operatorname{clip}(\\ell, 0, 10^6))$; NaN and $+\\infty$ map to the bound.

        Quadratic losses span many orders of magnitude during training, so the log keeps the
        meta-objective sensitive to progress at every scale; the clip bounds it by
        $\\log(1 + 10^6) \\approx 13.8$. (The noise term can make a loss negative; it maps to 0.)

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar in $[0, \\log(1 + 10^6)]$.
        """
        clipped = jnp.nan_to_num(
            jnp.clip(loss, 0.0, MAX_QUADRATIC_LOSS),
            nan=MAX_QUADRATIC_LOSS,
            posinf=MAX_QUADRATIC_LOSS,
            neginf=0.0,
        )
        return jnp.log1p(clipped)
