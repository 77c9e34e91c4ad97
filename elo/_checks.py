"""The predicates every validator of `elo` shares (each caller words its own message)."""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.core import Tracer


def is_int_at_least(value: Any, low: int) -> bool:
    """Whether `value` is a Python `int` (not a `bool`) that is at least `low`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def is_finite_number(value: Any) -> bool:
    """Whether `value` is a finite Python `int` or `float` (not a `bool`)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def positive_numbers(value: Any) -> tuple[float, ...] | None:
    """`value` as a non-empty tuple of finite positive floats (parameter scales), or None when
    it is not one (a string, a scalar, an empty or non-numeric sequence, a value <= 0)."""
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        return None
    if not value or not all(is_finite_number(v) and v > 0 for v in value):
        return None
    return tuple(float(v) for v in value)


def seed_tuple(seeds: Any) -> tuple[int, ...]:
    """`K` → seeds `0..K-1`; a sequence of seeds → a tuple; anything else a ValueError."""
    if isinstance(seeds, bool) or (isinstance(seeds, int) and seeds < 1):
        raise ValueError(f"seeds must be a positive count or a list of seeds, got {seeds}.")
    if isinstance(seeds, int):
        return tuple(range(seeds))
    out = tuple(int(s) for s in seeds)
    if not out:
        raise ValueError("seeds must not be empty.")
    return out


def concrete(value: Any) -> float | None:
    """The value as a Python float, or `None` if it is traced (and so cannot be validated)."""
    if isinstance(value, Tracer):
        return None
    return float(value)


def check_key(key: Any, where: str) -> None:
    """Raise a `TypeError` unless `key` is one JAX PRNG key: a typed key (`jax.random.key`) or a
    legacy `uint32[2]` key (`jax.random.PRNGKey`)."""
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key) and shape == ():
        return
    if dtype == jnp.uint32 and shape == (2,):
        return
    got = repr(key) if dtype is None else f"an array of dtype {dtype} and shape {shape}"
    raise TypeError(
        f"{where}: `key` must be a JAX PRNG key, e.g. jax.random.key(0) (one key, not a batch); "
        f"got {got}."
    )
