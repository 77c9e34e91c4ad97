"""Antithetic truncated Persistent Evolution Strategies (PES).

Generic over an *unroll*: nothing here knows about learned optimizers, tasks or ELO. The
meta-trainer and the tests (which drive exactly-quadratic systems) share this code.
"""

from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float

from .._custom_types import PRNGKeyArray, PyTree


LossReduction = Literal["mean", "sum"]


class Unrolled(eqx.Module):
    """What an unroll of one truncation reports to the PES estimator, per step.

    **Attributes:**

    - `losses`: the per-step meta-loss, shape `[R]`.
    - `mask`: which steps count towards the meta-loss, shape `[R]`.
    - `new_segment`: whether step `n` belongs to an inner trajectory that (re)started inside this
      truncation, shape `[R]` (true from the restart onwards).
    - `restart_xi`: the PES accumulator the restarted trajectory carries: zeros for a fresh start,
      the stored accumulator for a trajectory resumed from a snapshot. Ignored when no step is in a
      new segment.
    """

    losses: Float[Array, " R"]
    mask: Bool[Array, " R"]
    new_segment: Bool[Array, " R"]
    restart_xi: PyTree[Float[Array, "..."]]


def sample_perturbation(theta: PyTree, *, key: PRNGKeyArray, sigma: float | Array) -> PyTree:
    """Draw a Gaussian perturbation $\\varepsilon \\sim \\mathcal N(0, \\sigma^2 I)$ like `theta`.

    **Arguments:**

    - `theta`: the meta-parameters (a pytree of float arrays).
    - `key`: a JAX PRNG key.
    - `sigma`: the perturbation scale $\\sigma$.

    **Returns:**

    A pytree like `theta`.
    """
    leaves, treedef = jax.tree.flatten(theta)
    keys = jr.split(key, len(leaves))
    noise = [sigma * jr.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)]
    return jax.tree.unflatten(treedef, noise)


def pes_combine(
    deltas: Float[Array, " R"],
    new_segment: Bool[Array, " R"],
    eps: PyTree,
    xi: PyTree,
    restart_xi: PyTree,
    *,
    sigma: float | Array,
    reduction: LossReduction = "mean",
    mask: Bool[Array, " R"] | None = None,
) -> tuple[PyTree, PyTree]:
    """Combine one particle's antithetic loss differences into a PES gradient estimate.

    With $\\Delta_n = L^+_n - L^-_n$ (the per-step meta-loss of the $+\\varepsilon$ unroll minus
    that of the $-\\varepsilon$ unroll), $m_n$ the step mask, $h_n$ the new-segment flag and
    $D = \\sum_n m_n$ (or $1$ for `reduction="sum"`):

    $$\\hat g = \\frac{1}{2\\sigma^2 D}\\Big[(\\xi + \\varepsilon)\\sum_n \\Delta_n m_n (1-h_n)
    + (\\xi_r + \\varepsilon)\\sum_n \\Delta_n m_n h_n\\Big],$$

    and the accumulator becomes $\\xi_r + \\varepsilon$ if a new segment started in this
    truncation, else $\\xi + \\varepsilon$. A restarted trajectory's losses depend only on the
    perturbations it has seen: $\\varepsilon$ for a fresh start, $\\xi_r + \\varepsilon$ for a
    trajectory resumed with its stored accumulator $\\xi_r$.

    !!! info
        Exact (unbiased on quadratics) when at most one restart happens per truncation. With
        several, every restarted segment is credited to the accumulator of the last restart.

    **Arguments:**

    - `deltas`: $L^+_n - L^-_n$, shape `[R]`.
    - `new_segment`: $h_n$, shape `[R]`.
    - `eps`: this truncation's perturbation (a pytree like the meta-parameters).
    - `xi`: the accumulator before this truncation.
    - `restart_xi`: $\\xi_r$, the accumulator carried by the restarted trajectory.
    - `sigma`: the perturbation scale.
    - `reduction`: `"mean"` averages over valid steps (reference code); `"sum"` sums (paper).
    - `mask`: steps that count, shape `[R]` (`None`: all of them, as in meta-training).

    **Returns:**

    `(gradient_estimate, new_xi)`, both pytrees like the meta-parameters.
    """
    if mask is None:
        valid = jnp.asarray(deltas.shape[0])
    else:
        deltas = jnp.where(mask, deltas, 0.0)
        valid = jnp.sum(mask)
    if reduction == "mean":
        denom = jnp.maximum(valid, 1).astype(deltas.dtype)
    elif reduction == "sum":
        denom = jnp.asarray(1.0, deltas.dtype)
    else:
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}.")
    loss_old = jnp.sum(jnp.where(new_segment, 0.0, deltas)) / denom
    loss_new = jnp.sum(jnp.where(new_segment, deltas, 0.0)) / denom
    restarted = jnp.any(new_segment)
    scale = 1.0 / (2.0 * jnp.square(sigma))

    def leaf_grad(e, x, xr):
        return scale * (loss_old * (x + e) + loss_new * (xr + e))

    def leaf_xi(e, x, xr):
        return jnp.where(restarted, xr + e, x + e)

    grad = jax.tree.map(leaf_grad, eps, xi, restart_xi)
    new_xi = jax.tree.map(leaf_xi, eps, xi, restart_xi)
    return grad, new_xi


Unroll = Callable[[PyTree, PyTree, PRNGKeyArray], tuple[Unrolled, PyTree]]


def pes_grad(
    unroll: Unroll,
    theta: PyTree,
    pos_state: PyTree,
    neg_state: PyTree,
    xi: PyTree,
    *,
    key: PRNGKeyArray,
    sigma: float | Array,
    reduction: LossReduction = "mean",
) -> tuple[PyTree, tuple[PyTree, PyTree, PyTree], Float[Array, ""]]:
    """One antithetic PES estimate for one particle, for a single-objective unroll.

    Draws $\\varepsilon$, unrolls `theta + eps` from `pos_state` and `theta - eps` from
    `neg_state` with the same `key` (common random numbers: same data, same resets), and combines
    the per-step loss differences with [`elo.pes_combine`][].

    **Arguments:**

    - `unroll`: `(theta, inner_state, key) -> (Unrolled, inner_state)`; one truncation.
    - `theta`: the meta-parameters.
    - `pos_state`, `neg_state`: the persistent inner states of the $\\pm$ trajectories.
    - `xi`: the persistent accumulator $\\xi$ of this particle.
    - `key`: a JAX PRNG key.
    - `sigma`: the perturbation scale.
    - `reduction`: see [`elo.pes_combine`][].

    **Returns:**

    `(gradient_estimate, (pos_state, neg_state, xi), mean_loss)` where `mean_loss` is
    $\\tfrac12(\\bar L^+ + \\bar L^-)$ over the valid steps (for logging).
    """
    eps_key, unroll_key = jr.split(key)
    eps = sample_perturbation(theta, key=eps_key, sigma=sigma)
    theta_pos = jax.tree.map(jnp.add, theta, eps)
    theta_neg = jax.tree.map(jnp.subtract, theta, eps)
    out_pos, pos_state = unroll(theta_pos, pos_state, unroll_key)
    out_neg, neg_state = unroll(theta_neg, neg_state, unroll_key)
    grad, xi = pes_combine(
        out_pos.losses - out_neg.losses,
        out_pos.new_segment,
        eps,
        xi,
        out_pos.restart_xi,
        sigma=sigma,
        reduction=reduction,
        mask=out_pos.mask,
    )
    valid = jnp.maximum(jnp.sum(out_pos.mask), 1)
    mean_loss = 0.5 * jnp.sum(jnp.where(out_pos.mask, out_pos.losses + out_neg.losses, 0.0)) / valid
    return grad, (pos_state, neg_state, xi), mean_loss
