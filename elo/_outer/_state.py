"""`MetaState` and `init`: what a meta-training run carries between outer steps."""

import dataclasses
from collections.abc import Sequence
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Int

from .._checks import check_key
from .._config import MetaConfig
from .._custom_types import PRNGKeyArray, PyTree
from .._inner._inner_problem import InnerProblem
from .._inner._particle import Particle
from .._runtime._mesh import build_on_mesh, particle_mesh, place
from ..optimizers._base import AbstractLearnedOptimizer
from ..tasks import AbstractTask
from ._build import (
    build_learned_optimizer,
    build_meta_optimizer,
    build_problems,
    config_with_tasks,
)


Reduction = Literal["mean", "sum", "max"]


def _metric(reduction: Reduction | None):
    """A field of `Metrics` with how the statistic is reduced over particles, devices and task
    groups: `"mean"` (over particles, then task groups), `"sum"` (counts), `"max"`, or `None`
    (not a statistic of the particles: set by the meta-update)."""
    return eqx.field(metadata={"reduction": reduction})


class Metrics(eqx.Module):
    """What happened in the last outer step. All fields are scalar arrays.

    Losses describe the trajectories meta-training runs: with progressive supervision these are
    *fused* trajectories, $(1-\\alpha_t)$ expert plus $\\alpha_t$ learned optimizer, so while
    $\\alpha_t < 1$ they say little about the learned optimizer alone. To watch the learned
    optimizer alone, use [`elo.validate`][] (`elo meta-train --validate-every K`).

    **Attributes:**

    - `meta_loss`: $\\tfrac12(\\bar L^+ + \\bar L^-)$ of the normalised task loss of the trained
      (fused) trajectories, averaged over particles and task groups.
    - `task_loss`: mean raw training loss of the trained (fused) trajectories.
    - `grad_norm`: global norm of the meta-gradient before clipping (non-finite entries zeroed).
    - `nonfinite_grads`: meta-gradient entries that were non-finite and were zeroed before the
      update (0 in a healthy run).
    - `resets`: inner problems restarted (fresh or resumed), counted per particle.
    - `fresh_resets`: restarts from a fresh initialisation.
    - `buffer_resumes`: restarts from the resume buffer.
    - `max_inner_step`: the largest inner step any inner problem reached.
    - `mean_inner_step`: the mean inner step at the end of the truncation.
    - `nonfinite`: inner steps whose loss or parameters were non-finite (those problems reset).
    - `diverged`: inner problems ended by the divergence rule (finite, but their loss stayed
      above the bound; see `MetaConfig.divergence_factor`), counted per particle.
    - `alpha`: $\\alpha_t$, the learned optimizer's weight in the fused trajectory (mean over
      particles: with alternating supervision, the share of learned-optimizer unrolls).
    - `direction_loss`, `magnitude_loss`: mean imitation losses (0 without an expert; NaN at
      outer steps whose supervision does not use the expert, where they are not computed).
    - `imitation_mse`: mean CL imitation loss (0 unless `supervision == "alternating"`).
    """

    meta_loss: Float[Array, ""] = _metric("mean")
    task_loss: Float[Array, ""] = _metric("mean")
    grad_norm: Float[Array, ""] = _metric(None)
    resets: Int[Array, ""] = _metric("sum")
    fresh_resets: Int[Array, ""] = _metric("sum")
    buffer_resumes: Int[Array, ""] = _metric("sum")
    max_inner_step: Int[Array, ""] = _metric("max")
    mean_inner_step: Float[Array, ""] = _metric("mean")
    nonfinite: Int[Array, ""] = _metric("sum")
    diverged: Int[Array, ""] = _metric("sum")
    nonfinite_grads: Int[Array, ""] = _metric(None)
    alpha: Float[Array, ""] = _metric("mean")
    direction_loss: Float[Array, ""] = _metric("mean")
    magnitude_loss: Float[Array, ""] = _metric("mean")
    imitation_mse: Float[Array, ""] = _metric("mean")

    @classmethod
    def zeros(cls) -> "Metrics":
        """All-zero metrics (before the first outer step)."""
        return cls(
            **{
                f.name: jnp.zeros(
                    (), jnp.int32 if getattr(f.type, "dtype", None) is Int else jnp.float32
                )
                for f in dataclasses.fields(cls)
            }
        )

    def to_dict(self) -> dict[str, float | int]:
        """The metrics as Python numbers (one host transfer)."""
        host = jax.device_get(self)
        return {
            name: (int(v) if jnp.issubdtype(v.dtype, jnp.integer) else float(v))
            for name, v in vars(host).items()
        }


class MetaState(eqx.Module):
    """The state of a meta-training run.

    **Attributes:**

    - `config`: the run's [`elo.MetaConfig`][] (static).
    - `learned_optimizer`: the learned optimizer being meta-trained; its weights are the
      meta-parameters.
    - `meta_opt_state`: the meta-optimizer's optax state.
    - `groups`: per task group, the particles (leaves with a leading particle axis, sharded over
      devices).
    - `problems`: per task group, the inner problem definition (task data live here).
    - `step`: the number of outer steps done.
    - `metrics`: the last outer step's [`elo.Metrics`][].
    """

    config: MetaConfig = eqx.field(static=True)
    learned_optimizer: AbstractLearnedOptimizer
    meta_opt_state: PyTree
    groups: tuple[Particle, ...]
    problems: tuple[InnerProblem, ...]
    step: Int[Array, ""]
    metrics: Metrics


def init(
    config: MetaConfig, *, key: PRNGKeyArray, tasks: Sequence[AbstractTask] | None = None
) -> MetaState:
    """Start a meta-training run.

    Builds the learned optimizer, the inner problems (loading their data onto the device), the
    meta-optimizer and every particle's pair of inner problems, placed on the device mesh. In a
    multi-process run (after [`elo.distributed.initialize`][]) every process calls `init` with
    the same arguments; each keeps only the particles on its own devices.

    **Arguments:**

    - `config`: the run's configuration.
    - `key`: a JAX PRNG key; it decides the learned optimizer's initial weights and every
      particle's first inner problem.
    - `tasks`: optional inner problems given as objects (e.g. [`elo.tasks.ModelTask`][]s or
      built-in tasks from [`elo.tasks.get_task`][]), one task group each. They replace
      `config.tasks`, which the state's config then records as `name@fingerprint` per task
      ([`elo.tasks.task_label`][]): [`elo.load`][] accepts a checkpoint only for a state built
      with tasks of the same names and fingerprints. By default the tasks are built from the
      names in `config.tasks`.

    **Returns:**

    The initial [`elo.MetaState`][] (with the config that records the tasks).

    !!! example
        ```python
        state = elo.init(elo.presets.pes_small_fc(num_outer_steps=100), key=jax.random.key(0))
        ```
    """
    if not isinstance(config, MetaConfig):
        raise TypeError(f"`config` must be an elo.MetaConfig, got {type(config).__name__}.")
    check_key(key, "elo.init")
    if tasks is not None:
        config = config_with_tasks(config, tasks)
    # The devices first: a run that cannot be placed fails before any data is loaded.
    mesh = particle_mesh(config)
    lo_key, particles_key = jr.split(key)
    lo = build_learned_optimizer(config, key=lo_key)
    theta, _ = eqx.partition(lo, eqx.is_inexact_array)
    problems = build_problems(config, lo, tasks)
    # Particles are created where they live: each device computes only its own shard, from
    # the same key on every process (no process builds the whole array), with exactly the
    # sharding `meta_step` outputs, so the first call compiles the program the later ones use.
    groups = tuple(
        build_on_mesh(
            _make_particles,
            problem,
            theta,
            jr.fold_in(particles_key, index),
            config.num_particles,
            mesh=mesh,
            sharded=True,
        )
        for index, problem in enumerate(problems)
    )
    problems_dyn, problems_static = eqx.partition(problems, eqx.is_array)
    problems = eqx.combine(place(problems_dyn, mesh, sharded=False), problems_static)
    meta_opt_state = build_meta_optimizer(config).init(theta)
    theta, meta_opt_state, step, metrics = place(
        (theta, meta_opt_state, jnp.zeros((), jnp.int32), Metrics.zeros()), mesh, sharded=False
    )
    lo = eqx.combine(theta, eqx.partition(lo, eqx.is_inexact_array)[1])
    return MetaState(
        config=config,
        learned_optimizer=lo,
        meta_opt_state=meta_opt_state,
        groups=tuple(groups),
        problems=problems,
        step=step,
        metrics=metrics,
    )


def _make_particles(problem: InnerProblem, theta, key, num_particles: int) -> Particle:
    keys = jr.split(key, num_particles)
    return jax.vmap(lambda k: problem.init_particle(theta, key=k))(keys)
