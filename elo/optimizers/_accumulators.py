"""Gradient accumulators shared by the learned optimizers (and, in ELO, by their experts)."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from .._custom_types import Params, Updates


class LOState(eqx.Module):
    """State of a learned optimizer: rolling gradient statistics and counters.

    Every accumulator pytree has the structure of the parameters. For a parameter of shape $S$
    (scalars count as $S = ()$), with $k$ decays of each kind:

    - `mom`: momenta $m_j \\leftarrow \\beta_j m_j + (1 - \\beta_j) g$, shape $S + (k_m,)$;
    - `rms`: second moments $v \\leftarrow \\beta v + (1-\\beta) g^2$ (no square root),
      shape $S + (k_v,)$;
    - `v_row`, `v_col`: Adafactor factored second moments for rank $\\geq 2$, indexed by every
      axis but the largest (`v_row`) or the second largest (`v_col`), with a trailing decay axis;
      `(0, k_f)` for rank $\\leq 1$;
    - `v_diag`: the unfactored second moment for rank $\\leq 1$, shape $S + (k_f,)$; `(0, k_f)`
      for rank $\\geq 2$.

    `mom` and `rms` have the parameters' dtype (bfloat16 parameters keep bfloat16 momenta, as
    in the reference); `v_row`, `v_col` and `v_diag` are float32. Per element, that is 16 B
    for a float32 matrix (8 B in bfloat16) plus its row and column statistics, and 12 B more
    for a vector. `init` places each accumulator like its parameter when the parameter is
    sharded (`NamedSharding`).

    `iteration` counts the updates done so far and `num_steps` is the length of the run; both are
    `int32` scalar arrays, so they can be traced (e.g. when inner problems with different horizons
    are re-initialised inside `jax.vmap`/`jax.jit`).
    """

    mom: PyTree[Float[Array, "..."]]
    rms: PyTree[Float[Array, "..."]]
    v_row: PyTree[Float[Array, "..."]]
    v_col: PyTree[Float[Array, "..."]]
    v_diag: PyTree[Float[Array, "..."]]
    iteration: Int[Array, ""]
    num_steps: Int[Array, ""]


def factored_dims(shape: Sequence[int]) -> tuple[int, int] | None:
    """The axes `(d1, d0)` an Adafactor accumulator factors over, or `None` for rank <= 1.

    `d0` is the largest axis and `d1` the second largest, as ranked by `numpy.argsort` with its
    default sort kind. Ties are broken however that sort breaks them on this machine, exactly as
    in the reference implementation (the default kind is not stable on every CPU).
    """
    if len(shape) < 2:
        return None
    order = np.argsort(shape)
    return int(order[-2]), int(order[-1])


def safe_rsqrt(x: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """`rsqrt(max(x, 1e-9))`."""
    return lax.rsqrt(jnp.maximum(x, 1e-9))


def _decays(decays: Sequence[float], ndim: int) -> Float[Array, "..."]:
    return jnp.asarray(decays, jnp.float32).reshape((1,) * ndim + (len(decays),))


def _zeros(p: Array, shape: tuple[int, ...], dtype, dropped: int | None = None) -> Array:
    """Zeros of `shape` (the parameter's axes, `dropped` removed, then one more axis) placed
    like the parameter `p` when `p` is an array sharded by a `NamedSharding`."""
    try:
        sharding = p.sharding
    except AttributeError:  # a traced array: its placement is decided with the computation's
        sharding = None
    if not isinstance(sharding, NamedSharding):
        return jnp.zeros(shape, dtype)
    spec = list(sharding.spec) + [None] * (p.ndim - len(sharding.spec))
    if dropped is not None:
        del spec[dropped]
    return jnp.zeros(shape, dtype, device=NamedSharding(sharding.mesh, P(*spec, None)))


def init_accumulators(
    params: Params,
    num_steps: int | Int[ArrayLike, ""],
    *,
    momentum_decays: Sequence[float],
    rms_decays: Sequence[float],
    adafactor_decays: Sequence[float],
) -> LOState:
    """Zero accumulators for `params`; see [`elo.optimizers.LOState`][]."""
    leaves, treedef = jax.tree.flatten(params)
    nm, nv, nf = len(momentum_decays), len(rms_decays), len(adafactor_decays)
    mom, rms, row, col, diag = [], [], [], [], []
    # A new array for every empty slot: a state whose leaves share a buffer cannot be donated.
    empty = lambda: jnp.zeros((0, nf), jnp.float32)
    for p in leaves:
        shape = tuple(p.shape)
        mom.append(_zeros(p, shape + (nm,), p.dtype))
        rms.append(_zeros(p, shape + (nv,), p.dtype))
        dims = factored_dims(shape)
        if dims is None:
            row.append(empty())
            col.append(empty())
            diag.append(_zeros(p, shape + (nf,), jnp.float32))
        else:
            d1, d0 = dims
            row.append(
                _zeros(p, tuple(int(n) for n in np.delete(shape, d0)) + (nf,), jnp.float32, d0)
            )
            col.append(
                _zeros(p, tuple(int(n) for n in np.delete(shape, d1)) + (nf,), jnp.float32, d1)
            )
            diag.append(empty())
    unflatten = lambda xs: jax.tree.unflatten(treedef, xs)
    return LOState(
        mom=unflatten(mom),
        rms=unflatten(rms),
        v_row=unflatten(row),
        v_col=unflatten(col),
        v_diag=unflatten(diag),
        iteration=jnp.zeros((), jnp.int32),
        num_steps=jnp.asarray(num_steps, jnp.int32),
    )


def accumulate_leaf(
    g: Float[Array, "..."],
    m: Float[Array, "..."],
    v: Float[Array, "..."],
    v_row: Float[Array, "..."],
    v_col: Float[Array, "..."],
    v_diag: Float[Array, "..."],
    *,
    momentum_decays: Sequence[float],
    rms_decays: Sequence[float],
    adafactor_decays: Sequence[float],
) -> tuple[Float[Array, "..."], ...]:
    """Update the accumulators of one tensor with its gradient `g`.

    **Returns:**

    `(m, v, v_row, v_col, v_diag, fac_g)`: the post-update accumulators (in the dtypes of the
    inputs) and the Adafactor-normalised gradient $\\varphi_j$ of this step, shape
    `g.shape + (k_f,)`.
    """
    shape = g.shape
    scalar = g.ndim == 0
    out_dtypes = (m.dtype, v.dtype, v_row.dtype, v_col.dtype, v_diag.dtype)
    g = g.astype(jnp.float32)
    m, v = m.astype(jnp.float32), v.astype(jnp.float32)
    v_row, v_col, v_diag = (x.astype(jnp.float32) for x in (v_row, v_col, v_diag))
    if scalar:
        g, m, v, v_diag = g[None], m[None], v[None], v_diag[None]
    r = g.ndim
    gc = g[..., None]

    bm = _decays(momentum_decays, r)
    m = bm * m + (1 - bm) * gc
    bv = jnp.clip(_decays(rms_decays, r), 0.0, 1.0)
    v = bv * v + (1 - bv) * (gc * gc)

    bf = jnp.clip(_decays(adafactor_decays, r), 0.0, 1.0)
    gamma = g * g + 1e-30
    dims = factored_dims(shape)
    if dims is None:
        v_diag = bf * v_diag + (1.0 - bf) * gamma[..., None]
        fac_g = gc * safe_rsqrt(v_diag + 1e-9)
    else:
        d1, d0 = dims
        bfr = jnp.clip(_decays(adafactor_decays, r - 1), 0.0, 1.0)
        v_row = bfr * v_row + (1.0 - bfr) * jnp.mean(gamma, axis=d0)[..., None]
        v_col = bfr * v_col + (1.0 - bfr) * jnp.mean(gamma, axis=d1)[..., None]
        reduced_d1 = d1 - 1 if d1 > d0 else d1
        row_mean = jnp.mean(v_row, axis=reduced_d1, keepdims=True)
        row_factor = safe_rsqrt(v_row / (row_mean + 1e-9))
        col_factor = safe_rsqrt(v_col)
        fac_g = gc * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
    if scalar:
        m, v, fac_g = m[0], v[0], fac_g[0]
        if dims is None:
            v_diag = v_diag[0]
    new = (m, v, v_row, v_col, v_diag)
    return tuple(x.astype(dt) for x, dt in zip(new, out_dtypes)) + (fac_g,)


def accumulate(
    state: LOState,
    grads: Updates,
    *,
    momentum_decays: Sequence[float],
    rms_decays: Sequence[float],
    adafactor_decays: Sequence[float],
) -> tuple[LOState, Updates]:
    """Update every accumulator of `state` with `grads` (the counters are left unchanged).

    **Returns:**

    `(new_state, fac_g)`, where `fac_g` holds the Adafactor-normalised gradients of this step.
    """
    leaves, treedef = jax.tree.flatten(grads)
    trees = [
        treedef.flatten_up_to(x)
        for x in (state.mom, state.rms, state.v_row, state.v_col, state.v_diag)
    ]
    outs = [
        accumulate_leaf(
            g,
            *xs,
            momentum_decays=momentum_decays,
            rms_decays=rms_decays,
            adafactor_decays=adafactor_decays,
        )
        for g, *xs in zip(leaves, *trees)
    ]
    cols = [jax.tree.unflatten(treedef, [o[i] for o in outs]) for i in range(6)]
    mom, rms, v_row, v_col, v_diag, fac_g = cols
    new_state = LOState(
        mom=mom,
        rms=rms,
        v_row=v_row,
        v_col=v_col,
        v_diag=v_diag,
        iteration=state.iteration,
        num_steps=state.num_steps,
    )
    return new_state, fac_g
