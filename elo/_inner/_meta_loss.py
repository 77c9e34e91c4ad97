"""Mixing the antithetic per-step loss differences into one meta-objective difference."""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float


def rms_normalize(
    x: Float[Array, "particles steps"],
    mask: Bool[Array, "particles steps"] | None = None,
    *,
    axis_name: str | None = None,
) -> Float[Array, "particles steps"]:
    """Divide by the root-mean-square over all particles and steps of a task group.

    $\\mathrm{SMN}(x) = x / \\sqrt{\\mathrm{mean}(x^2)}$, the mean running over every entry of
    the group (on every device when `axis_name` is given), masked entries counting as zeros as in
    the reference. An all-zero array stays zero (the reference would produce NaN).

    **Arguments:**

    - `x`: per-particle, per-step values.
    - `mask`: which entries are valid (`None`: all).
    - `axis_name`: the mesh axis the particles are sharded over, if any.

    **Returns:**

    An array like `x`.
    """
    if mask is not None:
        x = jnp.where(mask, x, 0.0)
    total = jnp.sum(jnp.square(x))
    count = jnp.asarray(x.size, jnp.float32)
    if axis_name is not None:
        total = jax.lax.psum(total, axis_name)
        count = jax.lax.psum(count, axis_name)
    mean_square = total / count
    safe = jnp.where(mean_square > 0, mean_square, 1.0)
    return jnp.where(mean_square > 0, x * jax.lax.rsqrt(safe), 0.0)


def mix_deltas(
    task: Float[Array, "particles steps"],
    direction: Float[Array, "particles steps"],
    magnitude: Float[Array, "particles steps"],
    mask: Bool[Array, "particles steps"] | None = None,
    *,
    w_task: Float[Array, "*#weights"] | float,
    w_dir: Float[Array, "*#weights"] | float,
    w_mag: Float[Array, "*#weights"] | float,
    normalize_imitation: bool,
    imitation_scale: float,
    axis_name: str | None = None,
) -> Float[Array, "particles steps"]:
    """ELO's per-step meta-loss difference.

    $$\\Delta_n = w_{dir}\\, c\\, \\mathrm{SMN}(\\Delta^{dir})_n + w_{mag}\\, c\\,
    \\mathrm{SMN}(\\Delta^{mag})_n + w_{task}\\, \\Delta^{task}_n,$$

    where each $\\Delta^{\\cdot}_n = L^{\\cdot,+}_n - L^{\\cdot,-}_n$ is an antithetic difference,
    $c$ = `imitation_scale` and SMN is [`rms_normalize`][elo.internal.rms_normalize] (identity when
    `normalize_imitation` is false, as the paper writes the loss).

    **Arguments:**

    - `task`, `direction`, `magnitude`: the antithetic differences of the three losses.
    - `mask`: valid steps (`None`: all).
    - `w_task`, `w_dir`, `w_mag`: the supervision weights at this outer step: scalars, or
      per-particle columns of shape `[particles, 1]` (alternating supervision).
    - `normalize_imitation`: apply SMN to the imitation differences (reference behaviour).
    - `imitation_scale`: $c$ (reference: 0.01).
    - `axis_name`: the mesh axis the particles are sharded over, if any.

    **Returns:**

    The mixed differences, like `task`.
    """
    if normalize_imitation:
        direction = imitation_scale * rms_normalize(direction, mask, axis_name=axis_name)
        magnitude = imitation_scale * rms_normalize(magnitude, mask, axis_name=axis_name)
    return w_dir * direction + w_mag * magnitude + w_task * task
