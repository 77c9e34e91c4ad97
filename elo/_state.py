"""`MetaState` and `init`: what a meta-training run carries between outer steps."""

import dataclasses
import math
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Int

from ._config import MetaConfig
from ._custom_types import PRNGKeyArray, PyTree
from ._horizon import AbstractHorizon, CurriculumHorizon, LogUniformHorizon, UniformHorizon
from ._inner_problem import InnerProblem, Particle
from ._mesh import build_on_mesh, particle_mesh, place
from ._schedules import SupervisionSchedule
from .optimizers import adamw_expert, Celo2, expert_lr_schedule, muon_expert, SmallFC
from .optimizers._base import AbstractLearnedOptimizer
from .tasks import AbstractTask, get_task, ParameterScaleAugmentation


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
    - `direction_loss`, `magnitude_loss`: mean imitation losses (0 without an expert).
    - `imitation_mse`: mean CL imitation loss (0 unless `supervision == "alternating"`).
    """

    meta_loss: Float[Array, ""]
    task_loss: Float[Array, ""]
    grad_norm: Float[Array, ""]
    resets: Int[Array, ""]
    fresh_resets: Int[Array, ""]
    buffer_resumes: Int[Array, ""]
    max_inner_step: Int[Array, ""]
    mean_inner_step: Float[Array, ""]
    nonfinite: Int[Array, ""]
    diverged: Int[Array, ""]
    nonfinite_grads: Int[Array, ""]
    alpha: Float[Array, ""]
    direction_loss: Float[Array, ""]
    magnitude_loss: Float[Array, ""]
    imitation_mse: Float[Array, ""]

    @classmethod
    def zeros(cls) -> "Metrics":
        """All-zero metrics (before the first outer step)."""
        return cls(
            **{
                f.name: jnp.zeros((), jnp.int32 if f.type.dtype is Int else jnp.float32)
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


def build_learned_optimizer(config: MetaConfig, *, key: PRNGKeyArray) -> AbstractLearnedOptimizer:
    """The learned optimizer named by `config.optimizer`, freshly initialised."""
    if config.optimizer == "small_fc":
        return SmallFC(key=key)
    return Celo2(key=key)


def build_horizon(config: MetaConfig) -> AbstractHorizon:
    """The horizon sampler named by `config.horizon`."""
    if config.horizon == "log_uniform":
        return LogUniformHorizon(config.min_horizon, config.max_horizon)
    if config.horizon == "uniform":
        return UniformHorizon(config.min_horizon, config.max_horizon)
    return CurriculumHorizon(
        min_steps=config.min_horizon,
        max_steps=config.max_horizon,
        increment=config.curriculum_increment,
        unrolls_per_stage=config.curriculum_unrolls_per_stage,
        reference_off_by_one=config.curriculum_reference_off_by_one,
    )


def build_expert(
    config: MetaConfig, lo: AbstractLearnedOptimizer
) -> optax.GradientTransformation | None:
    """The expert named by `config.expert` (with the learned optimizer's $\\beta_2$), or `None`."""
    schedule = expert_lr_schedule(
        config.expert_lr_max, config.expert_lr_min, config.expert_lr_decay_steps
    )
    if config.expert == "adamw":
        return adamw_expert(schedule, b2=lo.expert_b2)
    if config.expert == "muon":
        return muon_expert(schedule, b2=lo.expert_b2)
    return None


def build_schedule(config: MetaConfig) -> SupervisionSchedule:
    """The progressive supervision schedule (no supervision without an expert)."""
    if config.expert == "none" or config.supervision == "alternating":
        return SupervisionSchedule.none()
    start, end = config.supervision_steps()
    return SupervisionSchedule(
        start=start,
        end=end,
        trajectory_floor=config.trajectory_floor,
        direction_floor=config.direction_floor,
        magnitude_floor=config.magnitude_floor,
        direction_weight=config.direction_weight,
        magnitude_weight=config.magnitude_weight,
    )


def build_meta_optimizer(config: MetaConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with a warmup-cosine learning rate (reference §2.6)."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=config.meta_learning_rate,
        warmup_steps=config.meta_warmup_steps,
        decay_steps=max(config.num_outer_steps, config.meta_warmup_steps + 1),
        end_value=config.meta_final_learning_rate,
    )
    return optax.chain(
        optax.clip_by_global_norm(config.meta_grad_clip),
        optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-8, weight_decay=config.meta_weight_decay),
    )


def build_problems(
    config: MetaConfig,
    lo: AbstractLearnedOptimizer,
    tasks: Sequence[AbstractTask] | None = None,
) -> tuple[InnerProblem, ...]:
    """One [`elo._inner_problem.InnerProblem`][] per task of `config.tasks` (or of `tasks`)."""
    if tasks is None:
        tasks = [
            get_task(name, data_dir=config.data_dir, batch_size=config.batch_size)
            for name in config.tasks
        ]
    elif len(tasks) != len(config.tasks):
        raise ValueError(
            f"`tasks` has {len(tasks)} task(s) but config.tasks names {len(config.tasks)}; give "
            "one task per name (the names then only label the task groups)."
        )
    _, lo_static = eqx.partition(lo, eqx.is_inexact_array)
    horizon = build_horizon(config)
    expert = build_expert(config, lo)
    bounds = [_divergence_bound(config, task) for task in tasks]
    augmentation = None
    if config.task_augmentation:
        augmentation = ParameterScaleAugmentation(config.min_param_scale, config.max_param_scale)
    return tuple(
        InnerProblem(
            task=task,
            lo_static=lo_static,
            expert=expert,
            horizon=horizon,
            augmentation=augmentation,
            truncation_length=config.truncation_length,
            resume_probability=config.resume_probability,
            buffer_slots=config.buffer_slots,
            buffer_stores_xi=config.buffer_stores_xi,
            initial_step_offset=config.initial_step_offset,
            imitation=config.supervision,
            fresh_init_expert_warm_start=config.fresh_init_expert_warm_start,
            divergence_bound=bound,
            divergence_patience=config.divergence_patience,
        )
        for task, bound in zip(tasks, bounds)
    )


def initial_loss(task: AbstractTask, *, num_inits: int = 8) -> float:
    """The task's mean training loss at fresh initialisations (fixed keys, so reproducible).

    The scale augmentation does not change it: a scaled task computes the same function.
    """
    keys = jr.split(jr.key(0), num_inits)
    losses = jax.jit(jax.vmap(lambda k: task.loss(task.init(k), k)))(keys)
    return float(jnp.mean(losses))


def _divergence_bound(config: MetaConfig, task: AbstractTask) -> float:
    if config.divergence_factor == 0.0:
        return math.inf
    loss = initial_loss(task)
    if not (math.isfinite(loss) and loss > 0):
        raise ValueError(
            f"divergence_factor needs a finite, positive initial loss, but the task "
            f"{type(task).__name__} has {loss}; set divergence_factor = 0 for this task."
        )
    return config.divergence_factor * loss


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
    - `tasks`: optional custom inner problems, one per entry of `config.tasks` (which then only
      names the groups). By default the tasks are built from their names.

    **Returns:**

    The initial [`elo.MetaState`][].

    !!! example
        ```python
        state = elo.init(elo.presets.pes_small_fc(num_outer_steps=100), key=jax.random.key(0))
        ```
    """
    if not isinstance(config, MetaConfig):
        raise TypeError(f"`config` must be an elo.MetaConfig, got {type(config).__name__}.")
    lo_key, particles_key = jr.split(key)
    lo = build_learned_optimizer(config, key=lo_key)
    theta, _ = eqx.partition(lo, eqx.is_inexact_array)
    problems = build_problems(config, lo, tasks)
    mesh = particle_mesh(config)
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
