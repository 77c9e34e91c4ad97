"""Gradient preprocessing and the argument checks done at the learned optimizers' boundary."""

import jax
import jax.numpy as jnp
import optax

from .._custom_types import Params, PyTree, Updates


def clip_and_clean(grads: Updates, *, clip_grad: bool, clip_norm: float) -> Updates:
    """Optionally clip by global norm (`optax.clip_by_global_norm`), then `nan_to_num`.

    After this, NaN entries are 0 and infinities are $\\pm$ the largest finite float.
    """
    if clip_grad:
        grads, _ = optax.clip_by_global_norm(clip_norm).update(grads, optax.EmptyState())
    return jax.tree.map(jnp.nan_to_num, grads)


def check_float_leaves(tree: PyTree, *, what: str) -> None:
    """Raise a `TypeError` naming the first leaf of `tree` that is not floating point."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        dtype = getattr(leaf, "dtype", None)
        if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(
                f"Every leaf of `{what}` must be a floating-point array; "
                f"{what}{jax.tree_util.keystr(path)} is {type(leaf).__name__}"
                + (f" of dtype {dtype}" if dtype is not None else "")
                + "."
            )


def check_structure(grads: Updates, params: Params, mom: PyTree, *, owner: str) -> None:
    """Raise a `ValueError` unless `grads` and `params` match the state's momentum tree `mom`
    (same tree structure; every leaf of shape `S` where `mom` holds `S + (k,)`)."""
    expected = jax.tree.structure(mom)
    for name, tree in (("grads", grads), ("params", params)):
        got = jax.tree.structure(tree)
        if got != expected:
            raise ValueError(
                f"{owner}.update: `{name}` has tree structure {got}, but the optimizer state was "
                f"created by `init` for parameters with structure {expected}. Call `init` again "
                "for the new parameters."
            )
    for (path, g), p, m in zip(
        jax.tree_util.tree_leaves_with_path(grads),
        jax.tree.leaves(params),
        jax.tree.leaves(mom),
        strict=True,
    ):
        where = jax.tree_util.keystr(path)
        if jnp.shape(g) != jnp.shape(p) or jnp.shape(p) != jnp.shape(m)[:-1]:
            raise ValueError(
                f"{owner}.update: shape mismatch at {where}: grads {jnp.shape(g)}, params "
                f"{jnp.shape(p)}, state for a parameter of shape {jnp.shape(m)[:-1]}."
            )
