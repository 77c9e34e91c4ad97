"""The difficulty score: an online CUSUM of loss increases, i.e. the loss's draw-up."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike
from jaxtyping import Array, ArrayLike, Bool, Float, Real


FAILURE_LOSS = 1e30
"""The loss value that stands for a failed step, and the bound on all losses.

Non-finite losses (NaN, $\\pm\\infty$) are replaced by it, and finite losses are clipped to
$[-10^{30}, 10^{30}]$, so that a blow-up registers as (nearly) the largest possible difficulty and
the score never becomes NaN or infinite. It is also the "previous loss" $\\ell_{-1}$ (and the
running minimum) after a reset, which makes $V_0 = 0$.
"""


def _float_dtype(*xs) -> jnp.dtype:
    # At least float32: FAILURE_LOSS does not fit in float16.
    return jnp.promote_types(jnp.result_type(*xs), jnp.float32)


def sanitize_loss(loss: Real[ArrayLike, "*batch"]) -> Float[Array, "*batch"]:
    r"""Map a loss to the finite value the difficulty score uses.

    NaN and $\pm\infty$ become $10^{30}$ (a failure is maximally difficult); finite values are
    clipped to $[-10^{30}, 10^{30}]$. In-range finite losses are returned unchanged.

    **Arguments:**

    - `loss`: raw per-step training losses (any shape).

    **Returns:**

    A float array (at least float32) of the same shape.
    """
    loss = jnp.asarray(loss)
    loss = loss.astype(_float_dtype(loss))
    return jnp.where(jnp.isfinite(loss), jnp.clip(loss, -FAILURE_LOSS, FAILURE_LOSS), FAILURE_LOSS)


def difficulty_step(
    prev_score: Real[ArrayLike, "*batch"],
    prev_loss: Real[ArrayLike, "*batch"],
    loss: Real[ArrayLike, "*batch"],
) -> Float[Array, "*batch"]:
    r"""One step of the difficulty score (ELO's online CUSUM).

    $$V_n = \max\bigl(0,\ V_{n-1} + (\ell_n - \ell_{n-1})\bigr),$$

    the paper's $V_n = \max(0, V_{n-1} - \Delta_n)$ with $\Delta_n = \ell_{n-1} - \ell_n$. After a
    reset use $V_{-1} = 0$ and $\ell_{-1} = 10^{30}$ (`FAILURE_LOSS`), which gives
    $V_0 = 0$. Both losses go through `sanitize_loss` first, so NaN/$\pm\infty$ count as
    $10^{30}$ and the result is always finite and $\geq 0$.

    This is the reference's recursion, step by step. To track a run, prefer `difficulty_update`,
    which computes the same score in closed form without accumulating round-off.

    **Arguments:**

    - `prev_score`: $V_{n-1}$.
    - `prev_loss`: $\ell_{n-1}$ (raw or already sanitized).
    - `loss`: $\ell_n$, the raw training loss of this step.

    **Returns:**

    $V_n$, elementwise, at least float32.
    """
    dtype = _float_dtype(prev_score, prev_loss, loss)
    prev_score = jnp.asarray(prev_score, dtype)
    diff = sanitize_loss(loss).astype(dtype) - sanitize_loss(prev_loss).astype(dtype)
    return jnp.maximum(prev_score + diff, 0)


class DifficultyState(eqx.Module):
    r"""The running statistics of the difficulty score within one inner run.

    **Fields:**

    - `score`: the current score $V_n$.
    - `min_loss`: the running minimum $\min_{k \leq n} \ell_k$ of the sanitized losses
      ($10^{30}$ right after a reset).
    - `max_score`: the running maximum $M_n = \max_{k \leq n} V_k$ (0 right after a reset).
    """

    score: Float[Array, "*batch"]
    min_loss: Float[Array, "*batch"]
    max_score: Float[Array, "*batch"]


def difficulty_init(shape: tuple[int, ...] = (), dtype: DTypeLike = jnp.float32) -> DifficultyState:
    r"""The difficulty statistics at the start of a run (fresh or resumed).

    **Arguments:**

    - `shape`: the batch shape (e.g. `()` per particle inside `jax.vmap`).
    - `dtype`: a floating dtype, at least float32.

    **Returns:**

    A `DifficultyState` with $V = 0$, $M = 0$ and running minimum $10^{30}$.
    """
    return DifficultyState(
        score=jnp.zeros(shape, dtype),
        min_loss=jnp.full(shape, FAILURE_LOSS, dtype),
        max_score=jnp.zeros(shape, dtype),
    )


def difficulty_update(state: DifficultyState, loss: Real[ArrayLike, "*batch"]) -> DifficultyState:
    r"""Advance the difficulty statistics by one inner step.

    Computes the same $V_n$ as `difficulty_step`, in its closed form: the draw-up
    $V_n = \ell_n - \min_{k \leq n} \ell_k$ of the sanitized losses, and
    $M_n = \max(M_{n-1}, V_n)$. Carrying the running minimum rather than the last loss avoids the
    round-off that the recursion accumulates over thousands of steps: a score is one subtraction
    away from the losses, equal losses give equal scores (so a plateau never registers a spurious
    new record in $M$), and the score stays accurate after a blow-up.

    **Arguments:**

    - `state`: the statistics after step $n-1$.
    - `loss`: the raw training loss $\ell_n$ of step $n$.

    **Returns:**

    The statistics after step $n$. Dtypes are those of `state`, so this is a valid `lax.scan`
    carry.
    """
    dtype = state.score.dtype
    loss = sanitize_loss(loss).astype(dtype)
    min_loss = jnp.minimum(state.min_loss, loss)
    score = loss - min_loss
    return DifficultyState(
        score=score, min_loss=min_loss, max_score=jnp.maximum(state.max_score, score)
    )


def difficulty_reset(state: DifficultyState, reset: Bool[ArrayLike, "*batch"]) -> DifficultyState:
    """Reset the statistics where `reset` holds, elementwise (uniform control flow).

    **Arguments:**

    - `state`: the current statistics.
    - `reset`: where to restart the score (a fresh init or a buffer resume).

    **Returns:**

    `state` where `reset` is false, `difficulty_init(...)` where it is true.
    """
    fresh = difficulty_init(state.score.shape, state.score.dtype)
    return jax.tree.map(lambda f, s: jnp.where(reset, f, s), fresh, state)


def difficulty_scores(
    losses: Real[ArrayLike, " steps *batch"],
) -> tuple[Float[Array, " steps *batch"], Float[Array, " steps *batch"]]:
    r"""The difficulty scores of a whole run, starting from a reset (`difficulty_update` scanned).

    $V_n = \ell_n - \min_{k \leq n} \ell_k$ on the sanitized losses; the recursion of
    `difficulty_step` gives the same values up to float round-off.

    **Arguments:**

    - `losses`: the raw training losses $\ell_0, \dots, \ell_{n-1}$ along the leading axis.

    **Returns:**

    `(scores, running_max)`: $V_n$ and $M_n = \max_{k \leq n} V_k$, both shaped like `losses`.
    """
    losses = jnp.asarray(losses)
    dtype = _float_dtype(losses)

    def step(state, loss):
        state = difficulty_update(state, loss)
        return state, (state.score, state.max_score)

    _, (scores, running_max) = jax.lax.scan(step, difficulty_init(losses.shape[1:], dtype), losses)
    return scores, running_max
