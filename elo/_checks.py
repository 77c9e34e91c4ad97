"""The predicates every validator of `elo` shares (each caller words its own message)."""

import math
from typing import Any

from jax.core import Tracer


def is_int_at_least(value: Any, low: int) -> bool:
    """Whether `value` is a Python `int` (not a `bool`) that is at least `low`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def is_finite_number(value: Any) -> bool:
    """Whether `value` is a finite Python `int` or `float` (not a `bool`)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
