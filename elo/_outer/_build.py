"""From a flat [`elo.MetaConfig`][] to the objects a run is made of: one registry per choice.

Every string choice of the config is translated here, once: config validation reads the same
names (the `Literal` types of `_config`), checkpoints look learned-optimizer classes up in
`elo.optimizers.LEARNED_OPTIMIZERS`.
"""

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import get_args

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Float, Key

from .._config import ExpertName, HorizonName, MetaConfig, OptimizerName, SupervisionName
from .._custom_types import PRNGKeyArray
from .._inner._divergence import AbstractDivergenceRule, LossBoundRule, NoDivergenceRule
from .._inner._horizon import AbstractHorizon, CurriculumHorizon, LogUniformHorizon, UniformHorizon
from .._inner._inner_problem import InnerProblem, UnrollSettings
from .._inner._restarts import AbstractRestarts, BufferedRestarts, FreshRestarts
from .._inner._schedules import SupervisionSchedule
from .._inner._supervision import (
    AbstractSupervision,
    AlternatingSupervision,
    NoSupervision,
    ProgressiveSupervision,
)
from ..optimizers import adamw_expert, expert_lr_schedule, muon_expert
from ..optimizers._base import AbstractLearnedOptimizer
from ..optimizers._registry import LEARNED_OPTIMIZERS
from ..tasks import AbstractTask, get_task, ParameterScaleAugmentation
from ..tasks._fingerprint import task_label


EXPERTS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "adamw": adamw_expert,
    "muon": muon_expert,
}
"""`MetaConfig.expert` → expert factory (`"none"`: no expert)."""


def _log_uniform(config: MetaConfig) -> AbstractHorizon:
    return LogUniformHorizon(config.min_horizon, config.max_horizon)


def _uniform(config: MetaConfig) -> AbstractHorizon:
    return UniformHorizon(config.min_horizon, config.max_horizon)


def _curriculum(config: MetaConfig) -> AbstractHorizon:
    return CurriculumHorizon(
        min_steps=config.min_horizon,
        max_steps=config.max_horizon,
        increment=config.curriculum_increment,
        unrolls_per_stage=config.curriculum_unrolls_per_stage,
        reference_off_by_one=config.curriculum_reference_off_by_one,
    )


HORIZONS: dict[str, Callable[[MetaConfig], AbstractHorizon]] = {
    "log_uniform": _log_uniform,
    "uniform": _uniform,
    "curriculum": _curriculum,
}
"""`MetaConfig.horizon` → horizon-sampler builder."""


def _progressive(config: MetaConfig) -> AbstractSupervision:
    start, end = config.supervision_steps()
    schedule = SupervisionSchedule(
        start=start,
        end=end,
        trajectory_floor=config.trajectory_floor,
        direction_floor=config.direction_floor,
        magnitude_floor=config.magnitude_floor,
        direction_weight=config.direction_weight,
        magnitude_weight=config.magnitude_weight,
    )
    return ProgressiveSupervision(
        schedule=schedule,
        normalize_imitation=config.normalize_imitation_deltas,
        imitation_scale=config.imitation_delta_scale,
        imitation_credit=config.imitation_credit,
        follow_expert_on_restart=config.fresh_init_expert_warm_start,
    )


def _alternating(config: MetaConfig) -> AbstractSupervision:
    return AlternatingSupervision(
        normalize_imitation=config.normalize_imitation_deltas,
        imitation_scale=config.imitation_delta_scale,
        follow_expert_on_restart=config.fresh_init_expert_warm_start,
    )


SUPERVISIONS: dict[str, Callable[[MetaConfig], AbstractSupervision]] = {
    "progressive": _progressive,
    "alternating": _alternating,
}
"""`MetaConfig.supervision` → supervision builder (used when there is an expert)."""

# The registries and the config's `Literal` types name the same choices.
assert set(LEARNED_OPTIMIZERS) == set(get_args(OptimizerName))
assert set(EXPERTS) | {"none"} == set(get_args(ExpertName))
assert set(HORIZONS) == set(get_args(HorizonName))
assert set(SUPERVISIONS) == set(get_args(SupervisionName))


def build_learned_optimizer(config: MetaConfig, *, key: PRNGKeyArray) -> AbstractLearnedOptimizer:
    """The learned optimizer named by `config.optimizer`, freshly initialised with
    `config.optimizer_settings`."""
    cls = LEARNED_OPTIMIZERS[config.optimizer]
    settings = dict(config.optimizer_settings)
    accepted = [
        name
        for name in inspect.signature(cls.__init__).parameters
        if name not in ("self", "key", "weights")
    ]
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise ValueError(
            f"MetaConfig.optimizer_settings: {cls.__name__} has no setting(s) {unknown}; its "
            f"settings are {', '.join(accepted)}."
        )
    return cls(key=key, **settings)


def build_horizon(config: MetaConfig) -> AbstractHorizon:
    """The horizon sampler named by `config.horizon`."""
    return HORIZONS[config.horizon](config)


def build_expert(
    config: MetaConfig, lo: AbstractLearnedOptimizer
) -> optax.GradientTransformation | None:
    """The expert named by `config.expert` (with the learned optimizer's $\\beta_2$), or `None`.

    Equal settings give the *same* object: an optax transformation is a pair of closures that
    compares by identity, and it is a static part of the compiled meta-step, so a new one per
    `elo.init` would recompile the meta-step for every new state of the same run.
    """
    if config.expert == "none":
        return None
    return _expert(
        config.expert,
        config.expert_lr_max,
        config.expert_lr_min,
        config.expert_lr_decay_steps,
        lo.expert_b2,
    )


@functools.cache
def _expert(
    name: str, lr_max: float, lr_min: float, decay_steps: int, b2: float
) -> optax.GradientTransformation:
    return EXPERTS[name](expert_lr_schedule(lr_max, lr_min, decay_steps), b2=b2)


def build_supervision(config: MetaConfig) -> AbstractSupervision:
    """The supervision mode: none without an expert, else the one `config.supervision` names."""
    if config.expert == "none":
        return NoSupervision()
    return SUPERVISIONS[config.supervision](config)


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


def initial_loss(task: AbstractTask, *, num_inits: int = 8) -> float:
    """The task's mean training loss at fresh initialisations (fixed keys, so reproducible).

    The scale augmentation does not change it: a scaled task computes the same function.
    """
    keys = jr.split(jr.key(0), num_inits)
    return float(jnp.mean(_losses_at_inits(task, keys)))


@eqx.filter_jit
def _losses_at_inits(task: AbstractTask, keys: Key[Array, " n"]) -> Float[Array, " n"]:
    # The task is an argument, not a closure: its data are traced rather than baked into the
    # program as constants, and one compiled program serves every `init` of tasks of the same
    # structure (a closure recompiled for each call: seconds per `elo.init` on a CPU).
    return jax.vmap(lambda k: task.loss(task.init(k), k))(keys)


def build_restarts(config: MetaConfig) -> AbstractRestarts:
    """The restart policy: the resume buffer when `config.resume_probability` is positive,
    else fresh restarts only."""
    if config.resume_probability == 0.0:
        return FreshRestarts()
    return BufferedRestarts(
        resume_probability=config.resume_probability,
        num_slots=config.buffer_slots,
        stores_xi=config.buffer_stores_xi,
    )


def build_divergence_rule(config: MetaConfig, task: AbstractTask) -> AbstractDivergenceRule:
    """The divergence rule of a task group: none when `config.divergence_factor` is 0, else
    a bound of `divergence_factor` times the task's [initial loss][elo.internal.initial_loss]."""
    if config.divergence_factor == 0.0:
        return NoDivergenceRule()
    loss = initial_loss(task)
    if not (math.isfinite(loss) and loss > 0):
        raise ValueError(
            f"divergence_factor needs a finite, positive initial loss, but the task "
            f"{type(task).__name__} has {loss}; set divergence_factor = 0 for this task."
        )
    return LossBoundRule(bound=config.divergence_factor * loss, patience=config.divergence_patience)


def config_with_tasks(config: MetaConfig, tasks: Sequence[AbstractTask]) -> MetaConfig:
    """`config` with `tasks` recording the task objects, one `name@fingerprint` each (see
    [`elo.tasks.task_label`][]), so that a checkpoint written with them is loaded only with the
    same tasks."""
    tasks = list(tasks)
    if not tasks:
        raise ValueError("`tasks` is empty; give at least one task, or None for config.tasks.")
    for task in tasks:
        if not isinstance(task, AbstractTask):
            raise TypeError(
                f"`tasks` must hold elo.tasks.AbstractTask objects, got {type(task).__name__}."
            )
    labels = tuple(task_label(task) for task in tasks)
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(
            f"`tasks` holds the same task more than once ({', '.join(repeated)}); each task is a "
            "group of particles, so give distinct tasks (or raise num_particles)."
        )
    return config.replace(tasks=labels)


def build_problems(
    config: MetaConfig,
    lo: AbstractLearnedOptimizer,
    tasks: Sequence[AbstractTask] | None = None,
) -> tuple[InnerProblem, ...]:
    """One [`InnerProblem`][elo.internal.InnerProblem] per task of `config.tasks` (or of
    `tasks`, which `config.tasks` then records; see `config_with_tasks`)."""
    if tasks is None:
        tasks = [
            get_task(name, data_dir=config.data_dir, batch_size=config.batch_size)
            for name in config.tasks
        ]
    _, lo_static = eqx.partition(lo, eqx.is_inexact_array)
    horizon = build_horizon(config)
    expert = build_expert(config, lo)
    supervision = build_supervision(config)
    restarts = build_restarts(config)
    settings = UnrollSettings(
        truncation_length=config.truncation_length,
        initial_step_offset=config.initial_step_offset,
    )
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
            supervision=supervision,
            restarts=restarts,
            divergence=build_divergence_rule(config, task),
            settings=settings,
        )
        for task in tasks
    )
