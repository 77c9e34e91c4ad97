"""The hand-designed baselines: one registry of optimizers, each a function of a learning-rate
schedule, and the schedules they run with."""

from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike
from jaxtyping import Array

from .._checks import is_int_at_least
from .._custom_types import Scalar, ScalarLike


WARMUP_FRACTION = 0.05
"""The share of the run spent warming up the learning rate (see [`elo.warmup_cosine`][])."""


def warmup_cosine(
    learning_rate: ScalarLike, num_steps: int, *, warmup_fraction: float = WARMUP_FRACTION
) -> optax.Schedule:
    """A learning-rate schedule: linear warmup, then cosine decay to zero.

    With $W = \\lfloor f T \\rfloor$ warmup steps out of $T$, the learning rate of update
    $t = 0, 1, \\dots$ is $\\eta (t + 1) / W$ for $t < W$ (no update at a zero rate), then
    $\\eta \\cdot \\tfrac12 \\bigl(1 + \\cos \\tfrac{\\pi (t - W)}{T - W}\\bigr)$, and 0 from
    $t = T$ on. `learning_rate` may be traced, so one compiled program sweeps it.

    **Arguments:**

    - `learning_rate`: the peak rate $\\eta$.
    - `num_steps`: the run length $T$ (positive).
    - `warmup_fraction`: $f \\in [0, 1)$.

    **Returns:**

    An optax schedule: a function of the update count.
    """
    if not is_int_at_least(num_steps, 1):
        raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}.")
    if not (0 <= warmup_fraction < 1):
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction!r}.")
    warmup = int(warmup_fraction * num_steps)

    def schedule(count: ArrayLike) -> Array:
        t = jnp.asarray(count, jnp.float32)
        ramp = (t + 1) / max(warmup, 1)
        decay = 0.5 * (1 + jnp.cos(jnp.pi * (t - warmup) / (num_steps - warmup)))
        factor = jnp.where(t < warmup, ramp, jnp.where(t < num_steps, decay, 0.0))
        return jnp.asarray(learning_rate, jnp.float32) * factor

    return schedule


def _adamw(schedule: optax.Schedule) -> optax.GradientTransformation:
    return optax.adamw(schedule)


def _adam(schedule: optax.Schedule) -> optax.GradientTransformation:
    return optax.adam(schedule)


def _sgd(schedule: optax.Schedule) -> optax.GradientTransformation:
    return optax.sgd(schedule, momentum=0.9)


def _muon(schedule: optax.Schedule) -> optax.GradientTransformation:
    return optax.contrib.muon(schedule)


BASELINES: dict[str, Callable[[optax.Schedule], optax.GradientTransformation]] = {
    "adamw": _adamw,
    "adam": _adam,
    "sgd": _sgd,
    "muon": _muon,
}
"""The hand-designed baselines by name, each a function of a learning-rate schedule (a constant
rate is `optax.constant_schedule(rate)`): `optax.adamw` (weight decay $10^{-4}$), `optax.adam`,
`optax.sgd` with momentum 0.9, and `optax.contrib.muon` (Newton–Schulz on matrices, Adam on the
rest). [`elo.evaluate`][] runs them at a constant rate, [`elo.tune`][] and [`elo.compare`][]
sweep their (peak) rate.

`"sgd"` has momentum 0.9 everywhere, as the tuned baselines always had (and the studies'
results used); before this one registry, `elo.evaluate("sgd")` and `elo evaluate sgd` ran plain
SGD."""

TUNED_BASELINES = BASELINES
"""The former name of [`elo.BASELINES`][] (the same registry)."""

ScheduleShape = Literal["warmup_cosine", "constant"]
SCHEDULE_SHAPES = ("warmup_cosine", "constant")


def check_schedule_shape(schedule: object) -> None:
    if schedule not in SCHEDULE_SHAPES:
        raise ValueError(f"schedule must be 'warmup_cosine' or 'constant', got {schedule!r}.")


class ScheduledBaseline(eqx.Module):
    """A baseline of `BASELINES` as a function of its (traced) peak learning rate, for the
    training program."""

    name: str = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    schedule: ScheduleShape = eqx.field(static=True)

    def __call__(self, learning_rate: Scalar) -> optax.GradientTransformation:
        if self.schedule == "constant":
            schedule = optax.constant_schedule(learning_rate)
        else:
            schedule = warmup_cosine(learning_rate, self.num_steps)
        return BASELINES[self.name](schedule)
