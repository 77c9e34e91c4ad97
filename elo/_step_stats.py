"""`StepStats`: what one outer step measured, each statistic with its reduction declared once."""

import dataclasses
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ._particle import Particle
from ._records import StepRecord
from ._state import Metrics


Reduction = Literal["mean", "sum", "max"]


def _stat(reduction: Reduction):
    return eqx.field(metadata={"reduction": reduction})


class StepStats(eqx.Module):
    """The statistics of an outer step, reduced over particles, devices and task groups.

    Each field declares its reduction: `"mean"` (over particles, then over task groups),
    `"sum"` (counts) or `"max"`. The names are [`elo.Metrics`][]'s, which documents them.
    """

    meta_loss: Float[Array, ""] = _stat("mean")
    task_loss: Float[Array, ""] = _stat("mean")
    resets: Int[Array, ""] = _stat("sum")
    fresh_resets: Int[Array, ""] = _stat("sum")
    buffer_resumes: Int[Array, ""] = _stat("sum")
    max_inner_step: Int[Array, ""] = _stat("max")
    mean_inner_step: Float[Array, ""] = _stat("mean")
    nonfinite: Int[Array, ""] = _stat("sum")
    diverged: Int[Array, ""] = _stat("sum")
    alpha: Float[Array, ""] = _stat("mean")
    direction_loss: Float[Array, ""] = _stat("mean")
    magnitude_loss: Float[Array, ""] = _stat("mean")
    imitation_mse: Float[Array, ""] = _stat("mean")

    @classmethod
    def of_group(
        cls,
        records: StepRecord,
        particles: Particle,
        alpha: Float[Array, " particles"],
        *,
        num_particles: int,
        axis_name: str,
    ) -> "StepStats":
        """A task group's statistics from its local particles, reduced over the devices.

        **Arguments:**

        - `records`: the truncation's records, leading axes `[particles, R]`.
        - `particles`: the particles after the truncation.
        - `alpha`: each particle's $\\alpha$.
        - `num_particles`: the group's particle count over all devices (for means).
        - `axis_name`: the mesh axis the particles are sharded over.
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
        return cls(
            **{
                f.name: reduce[f.metadata["reduction"]](per_particle[f.name])
                for f in dataclasses.fields(cls)
            }
        )

    @classmethod
    def merge(cls, groups: list["StepStats"]) -> "StepStats":
        """Combine the statistics of several task groups (means are averaged over groups)."""
        reduce = {
            "mean": jnp.mean,
            "sum": lambda x: jnp.sum(x).astype(jnp.int32),
            "max": jnp.max,
        }
        return cls(
            **{
                f.name: reduce[f.metadata["reduction"]](
                    jnp.stack([getattr(g, f.name) for g in groups])
                )
                for f in dataclasses.fields(cls)
            }
        )

    def to_metrics(self, grad_norm: Float[Array, ""], nonfinite_grads: Int[Array, ""]) -> Metrics:
        """The [`elo.Metrics`][] of the step."""
        stats = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        stats["max_inner_step"] = stats["max_inner_step"].astype(jnp.int32)
        return Metrics(
            **stats,
            grad_norm=grad_norm,
            nonfinite_grads=jnp.asarray(nonfinite_grads, jnp.int32),
        )
