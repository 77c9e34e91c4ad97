"""Small helpers shared by the tests."""

import equinox as eqx
import jax
import numpy as np


def tree_allclose(x, y, *, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether two pytrees have the same structure and numerically close leaves."""
    return bool(eqx.tree_equal(x, y, typematch=True, rtol=rtol, atol=atol))


def max_abs_diff(x, y) -> float:
    """Largest absolute elementwise difference between two pytrees of arrays."""
    diffs = jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0)), x, y)
    return max(jax.tree.leaves(diffs), default=0.0)
