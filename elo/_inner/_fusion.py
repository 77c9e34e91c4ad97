"""Progressive expert supervision: the fused inner step and the imitation losses of ELO."""

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree

from .._custom_types import Params, Scalar, ScalarLike, Updates
from ..optimizers._base import AbstractLearnedOptimizer


class FusedStep(eqx.Module):
    """The result of [`elo.fused_step`][]: the blended parameters, both optimizer states and
    the two unblended steps."""

    params: Params
    lo_state: PyTree
    expert_state: PyTree
    lo_delta: Updates
    expert_delta: Updates


def fused_step(
    expert: optax.GradientTransformation,
    lo: AbstractLearnedOptimizer,
    alpha: ScalarLike,
    grads: Updates,
    expert_state: PyTree,
    lo_state: PyTree,
    params: Params,
) -> FusedStep:
    """One inner step of ELO, blending an expert optimizer's step with a learned optimizer's.

    Both candidates start from the same parameters $\\theta_n$ and see the same gradient,
    preprocessed once by `lo.preprocess_grads` (e.g. global-norm clipping and `nan_to_num`), so
    the expert's moments track the learned optimizer's accumulators:

    $$\\theta^E = \\theta_n + u_E,\\quad \\theta^O = \\theta_n + u_O,\\quad
    \\theta_{n+1} = (1-\\alpha)\\,\\theta^E + \\alpha\\,\\theta^O,$$

    $$\\Delta_E = \\theta^E - \\theta_n,\\quad \\Delta_O = \\theta^O - \\theta_n.$$

    The deltas are float32 differences of the rounded candidates, as in the reference; pass them
    to [`elo.imitation_losses`][]. At $\\alpha = 0$ the new parameters are exactly the
    expert's, at $\\alpha = 1$ exactly the learned optimizer's.

    **Arguments:**

    - `expert`: an optax transformation, e.g. [`elo.optimizers.adamw_expert`][] or
      [`elo.optimizers.muon_expert`][].
    - `lo`: the learned optimizer.
    - `alpha`: $\\alpha$, the weight of the learned optimizer ($1 -$ the reference's
      `expert_weight`).
    - `grads`: raw gradients at $\\theta_n$.
    - `expert_state`, `lo_state`: the two optimizers' states.
    - `params`: $\\theta_n$.

    **Returns:**

    A [`elo.FusedStep`][] with `params` $=\\theta_{n+1}$, both new states, `lo_delta`
    $=\\Delta_O$ and `expert_delta` $=\\Delta_E$.
    """
    grads = lo.preprocess_grads(grads)
    lo_updates, lo_state = lo.update_preprocessed(grads, lo_state, params)
    expert_updates, expert_state = expert.update(grads, expert_state, params)
    p_lo = jax.tree.map(lambda p, u: p + u, params, lo_updates)
    p_e = jax.tree.map(lambda p, u: (p + u).astype(p.dtype), params, expert_updates)
    alpha = jnp.asarray(alpha, jnp.float32)
    new_params = jax.tree.map(
        lambda p, e, o: ((1 - alpha) * e + alpha * o).astype(p.dtype), params, p_e, p_lo
    )
    lo_delta = jax.tree.map(lambda o, p: o - p, p_lo, params)
    expert_delta = jax.tree.map(lambda e, p: e - p, p_e, params)
    return FusedStep(
        params=new_params,
        lo_state=lo_state,
        expert_state=expert_state,
        lo_delta=lo_delta,
        expert_delta=expert_delta,
    )


def imitation_losses(
    expert_delta: Updates,
    lo_delta: Updates,
    *,
    magnitude: Literal["norm", "elementwise"] = "norm",
    include: PyTree[bool] | None = None,
) -> tuple[Scalar, Scalar]:
    """The direction and magnitude imitation losses between an expert's and a learned optimizer's
    step.

    With the included leaves of both steps flattened and concatenated,

    $$L_{dir} = 1 - \\frac{\\langle\\Delta_E, \\Delta_O\\rangle}
    {\\lVert\\Delta_E\\rVert\\,\\lVert\\Delta_O\\rVert + 10^{-30}} \\in [0, 2],$$

    and $L_{mag} = |\\lVert\\Delta_O\\rVert - \\lVert\\Delta_E\\rVert|$ (`"norm"`, small_fc) or
    $L_{mag} = \\mathrm{mean}_j\\,\\bigl||\\Delta_{E,j}| - |\\Delta_{O,j}|\\bigr|$
    (`"elementwise"`, Celo2). When either step is zero, $L_{dir} = 1$.

    Use `magnitude=lo.imitation_magnitude, include=lo.imitation_leaves(params)` to get the
    losses the reference defines for `lo`.

    **Arguments:**

    - `expert_delta`, `lo_delta`: $\\Delta_E$ and $\\Delta_O$ (e.g. from [`elo.fused_step`][]).
    - `magnitude`: the form of $L_{mag}$.
    - `include`: a pytree of Python bools with the structure of the deltas; only `True` leaves
      take part. `None` means all.

    **Returns:**

    `(L_dir, L_mag)`, float32 scalars.
    """
    if magnitude not in ("norm", "elementwise"):
        raise ValueError(f"`magnitude` must be 'norm' or 'elementwise'; got {magnitude!r}.")
    e_leaves, treedef = jax.tree.flatten(expert_delta)
    o_leaves = treedef.flatten_up_to(lo_delta)
    keep = [True] * len(e_leaves) if include is None else treedef.flatten_up_to(include)
    pairs = [
        (e.astype(jnp.float32), o.astype(jnp.float32))
        for e, o, k in zip(e_leaves, o_leaves, keep)
        if k
    ]
    if not pairs:
        raise ValueError("`imitation_losses` needs at least one included leaf.")

    def total(fn) -> Float[Array, ""]:
        return sum((jnp.sum(fn(e, o)) for e, o in pairs), start=jnp.zeros((), jnp.float32))

    dot = total(lambda e, o: e * o)
    norm_e = jnp.sqrt(total(lambda e, o: e * e))
    norm_o = jnp.sqrt(total(lambda e, o: o * o))
    l_dir = jnp.clip(1.0 - dot / (norm_e * norm_o + 1e-30), 0.0, 2.0)
    if magnitude == "norm":
        l_mag = jnp.abs(norm_o - norm_e)
    else:
        size = sum(e.size for e, _ in pairs)
        l_mag = total(lambda e, o: jnp.abs(jnp.abs(e) - jnp.abs(o))) / size
    return l_dir, l_mag
