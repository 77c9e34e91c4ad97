"""What one outer step measured: each task group's statistics, reduced as `Metrics` declares.

The statistics are the fields of [`elo.Metrics`][]; each field declares its reduction there
(`"mean"`, `"sum"`, `"max"`, or `None` for the two the meta-update sets), so a new statistic is
one field and one line in `group_metrics`.
"""

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._inner._particle import Particle
from .._inner._records import StepRecord
from ._state import Metrics


def _statistics() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(Metrics) if f.metadata["reduction"] is not None]


def group_metrics(
    records: StepRecord,
    particles: Particle,
    alpha: Float[Array, " particles"],
    *,
    num_particles: int,
    axis_name: str,
) -> Metrics:
    """A task group's statistics from its local particles, reduced over the devices.

    **Arguments:**

    - `records`: the truncation's records, leading axes `[particles, R]`.
    - `particles`: the particles after the truncation.
    - `alpha`: each particle's $\\alpha$.
    - `num_particles`: the group's particle count over all devices (for means).
    - `axis_name`: the mesh axis the particles are sharded over.

    **Returns:**

    [`elo.Metrics`][] whose `grad_norm` and `nonfinite_grads` are 0 (the meta-update sets them).
    """

    def side_mean(x):
        return jnp.mean(x, axis=(1, 2))

    def count(x):
        return jnp.sum(x, axis=1)

    per_particle = dict(
        meta_loss=side_mean(records.meta_loss),
        task_loss=side_mean(records.task_loss),
        resets=count(records.resumed | records.fresh),
        fresh_resets=count(records.fresh),
        buffer_resumes=count(records.resumed),
        max_inner_step=jnp.max(records.step, axis=1),
        mean_inner_step=particles.step.astype(jnp.float32),
        nonfinite=count(records.nonfinite),
        diverged=count(records.diverged),
        alpha=alpha,
        direction_loss=side_mean(records.direction_loss),
        magnitude_loss=side_mean(records.magnitude_loss),
        imitation_mse=side_mean(records.imitation_mse),
    )
    reduce = {
        "mean": lambda x: jax.lax.psum(jnp.sum(x, axis=0), axis_name) / num_particles,
        "sum": lambda x: jax.lax.psum(jnp.sum(x), axis_name),
        "max": lambda x: jax.lax.pmax(jnp.max(x), axis_name),
    }
    return dataclasses.replace(
        Metrics.zeros(),
        **{f.name: reduce[f.metadata["reduction"]](per_particle[f.name]) for f in _statistics()},
    )


def merge_groups(groups: list[Metrics]) -> Metrics:
    """Combine the statistics of several task groups (means are averaged over groups)."""
    reduce = {
        "mean": jnp.mean,
        "sum": lambda x: jnp.sum(x).astype(jnp.int32),
        "max": lambda x: jnp.max(x).astype(jnp.int32),
    }
    return dataclasses.replace(
        groups[0],
        **{
            f.name: reduce[f.metadata["reduction"]](jnp.stack([getattr(g, f.name) for g in groups]))
            for f in _statistics()
        },
    )
