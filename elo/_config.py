"""`MetaConfig`: every choice of a meta-training run, validated on construction."""

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, get_args, Literal

import equinox as eqx

from ._checks import is_finite_number, is_int_at_least


OptimizerName = Literal["small_fc", "celo2"]
ExpertName = Literal["none", "adamw", "muon"]
HorizonName = Literal["log_uniform", "uniform", "curriculum"]
LossReduction = Literal["mean", "sum"]
SupervisionName = Literal["progressive", "alternating"]
ImitationCredit = Literal["xi", "epsilon"]

DEFAULT_TASKS = (
    "mlp-w32-d1_mnist-8x8x1",
    "mlp-w32-d1_fashionmnist-8x8x1",
    "mlp-w32-d1_cifar10-8x8x3",
)


def _tasks_tuple(value: Any) -> Any:
    """Lists of task names become tuples; anything else (a lone string included) is left for
    `__check_init__` to judge."""
    return tuple(value) if isinstance(value, list) else value


def _settings_tuple(value: Any) -> Any:
    """A mapping of a learned optimizer's keyword arguments becomes a sorted tuple of
    `(name, value)` pairs (lists become tuples), so that the config stays hashable; anything else
    is left for `__check_init__` to judge."""
    if isinstance(value, Mapping):
        value = list(value.items())
    if isinstance(value, (list, tuple)) and all(
        isinstance(item, (list, tuple)) and len(item) == 2 for item in value
    ):
        pairs = ((k, tuple(v) if isinstance(v, list) else v) for k, v in value)
        return tuple(sorted(pairs, key=lambda kv: str(kv[0])))
    return value


def _fail(field: str, value: Any, allowed: str) -> None:
    raise ValueError(f"MetaConfig.{field} = {value!r} is invalid: it must be {allowed}.")


def _check_int(field: str, value: Any, low: int) -> None:
    if not is_int_at_least(value, low):
        _fail(field, value, f"an integer >= {low}")


def _check_float(field: str, value: Any, low: float, high: float, *, open_low=False) -> None:
    ok = is_finite_number(value)
    if ok:
        ok = (value > low if open_low else value >= low) and value <= high
    if not ok:
        bracket = "(" if open_low else "["
        _fail(field, value, f"a finite number in {bracket}{low}, {high}]")


def _check_choice(field: str, value: Any, choices: Any) -> None:
    choices = get_args(choices)
    if value not in choices:
        _fail(field, value, "one of " + ", ".join(repr(c) for c in choices))


class MetaConfig(eqx.Module):
    """The configuration of a meta-training run.

    Every field is a plain Python value and the whole config is static in the compiled
    `meta_step`: changing a field recompiles, reading one never does. Construction validates every
    field and raises a `ValueError` naming the field, the bad value and the allowed range. Build
    one from a preset ([`elo.presets`][]) and override fields with keyword arguments, or with
    `config.replace(field=value)`.

    **Attributes:**

    *Inner problems*

    - `tasks`: task names (see [`elo.tasks.get_task`][]); each is a task group with its own
      particles. Groups may differ in parameter shapes.
    - `batch_size`: minibatch size of the inner problems (reference: 64).
    - `task_augmentation`: draw a log-uniform parameter scale per inner problem (§5.3).
    - `min_param_scale`, `max_param_scale`: the scale range (reference: 1e-3, 1e3).
    - `data_dir`: where the datasets live (`None`: `ELO_DATA_DIR`, then the embedded copy).

    *Learned optimizer and expert*

    - `optimizer`: `"small_fc"` or `"celo2"`.
    - `optimizer_settings`: keyword arguments of the learned optimizer's constructor
      ([`elo.SmallFC`][], [`elo.Celo2`][]), e.g. the schedule its inner problems run with
      (`{"init_lr": 0.0, "end_lr": 0.0, "warmup_fraction": 0.05}`); empty: its defaults. A
      mapping (stored as sorted `(name, value)` pairs); unknown names are refused by
      [`elo.init`][]. On the command line: `--set optimizer.NAME=VALUE`.
    - `expert`: `"none"` (PES baselines), `"adamw"` or `"muon"`.
    - `expert_lr_max`, `expert_lr_min`, `expert_lr_decay_steps`: the expert's cosine learning
      rate over inner steps (ELO: $10^{-2} \to 10^{-4}$ over 10K; CL: $10^{-3} \to 10^{-5}$).

    *PES*

    - `num_particles`: perturbation directions per task group; each runs a $+$ and a $-$ inner
      problem. Must be divisible by the number of devices.
    - `truncation_length`: inner steps $R$ per outer step, at most `max_horizon`.
    - `sigma`: the perturbation scale $\\sigma$ (reference: 0.01).
    - `loss_reduction`: `"mean"` averages per-step losses over a truncation (reference code),
      `"sum"` sums them (paper).

    *Horizons*

    - `horizon`: `"log_uniform"` (PES baselines), `"uniform"` (ELO) or `"curriculum"` (CL).
    - `min_horizon`, `max_horizon`: horizon range $[N_{min}, N_{max})$.
    - `curriculum_increment`, `curriculum_unrolls_per_stage`: $N_j = \\min(N_{max}, N_{min} +
      \\text{increment}\\lfloor j/\\text{per stage}\\rfloor)$.
    - `curriculum_reference_off_by_one`: end curriculum unrolls at step $N_j - 1$ as the
      reference code does (default: at $N_j$).
    - `initial_step_offset`: at initialisation each inner problem starts at a random inner step in
      `[0, offset)` so that particles do not all reset together (reference: 1000).

    *Divergence reset*

    - `divergence_factor`: a side whose raw task loss stays above `divergence_factor` times the
      task's initial loss (its mean at fresh initialisations) for `divergence_patience`
      consecutive inner steps has diverged: the particle's unroll ends for both sides, as for a
      non-finite loss, it is reset, counted in `Metrics.diverged`, and no window in which a
      problem diverged or went non-finite is pushed to the resume buffer. `0` switches the rule
      off (reference code: only non-finite problems end early). Must be 0 or > 1.
    - `divergence_patience`: $k$, the consecutive steps above the bound that count as diverged.

    *Failure-aware resume buffer*

    - `resume_probability`: $P_B$, the probability that a reset resumes from the buffer
      (0 disables the buffer; reference ELO: 0.8 or 0.9).
    - `buffer_slots`: snapshots kept per particle.
    - `buffer_stores_xi`: store the PES accumulator $\\xi$ with each snapshot (paper, unbiased);
      `False` resets it to $\\varepsilon$ on resume (reference code).

    *Expert supervision* (ignored when `expert == "none"`)

    - `supervision`: `"progressive"` (ELO: fused trajectory and loss mixing on the ramp below)
      or `"alternating"` (CL-small_fc, Chen et al.: each particle alternates whole unrolls of
      pure-expert behaviour cloning, scored by the MSE imitation loss, with pure learned-optimizer
      unrolls scored by the task loss).
    - `fresh_init_expert_warm_start`: reproduce the reference's hidden warm start: a particle that
      restarts fresh mid-truncation follows the pure expert until the next truncation boundary.

    - `supervision_start`, `supervision_end`: outer steps $t_s \\le t_e$ of the ramp; the paper's
      $\\alpha_t = t/(T-1)$ is `0, num_outer_steps - 1`.
    - `supervision_start_fraction`, `supervision_end_fraction`: the same two points as fractions
      of `num_outer_steps` ($t_s = \\mathrm{round}(f_s T)$), so that a schedule keeps its split of
      imitation, ramp and learned-optimizer-alone steps when the budget changes. Give both or
      neither; when given, they replace `supervision_start` and `supervision_end`.
    - `imitation_credit`: which perturbation the imitation deltas are credited to in the PES
      estimate: `"xi"` (the paper: one PES estimate of the mixed loss, credited to the
      accumulated $\\xi + \\varepsilon$) or `"epsilon"` (the imitation deltas credited to this
      truncation's $\\varepsilon$ alone, the task deltas still to $\\xi + \\varepsilon$; while the
      expert dominates the trajectory, the imitation losses depend almost only on the current
      perturbation, and crediting them to $\\xi$ adds variance without signal).
    - `trajectory_floor`, `direction_floor`, `magnitude_floor`: floors of the ramps.
    - `direction_weight`, `magnitude_weight`: $\\lambda_{dir}$, $\\lambda_{mag}$ (0.7, 0.3).
    - `normalize_imitation_deltas`: RMS-normalise the antithetic imitation-loss differences
      over the group's particles and steps (reference), else use them raw (paper).
    - `imitation_delta_scale`: the factor on the normalised imitation deltas (reference: 0.01).

    *Meta-optimizer* (AdamW with warmup-cosine, after global-norm clipping)

    - `num_outer_steps`: $T$, the length of the schedule.
    - `meta_learning_rate`, `meta_final_learning_rate`, `meta_warmup_steps`.
    - `meta_weight_decay`, `meta_grad_clip`.

    *Devices*

    - `num_devices`: devices the particles are sharded over (`None`: the largest number of
      available devices that divides `num_particles`; see [`elo.use_cpu_cores`][] for CPUs).
    """

    tasks: tuple[str, ...] = eqx.field(default=DEFAULT_TASKS, converter=_tasks_tuple)
    batch_size: int = 64
    task_augmentation: bool = True
    min_param_scale: float = 1e-3
    max_param_scale: float = 1e3
    data_dir: str | None = None

    optimizer: OptimizerName = "small_fc"
    optimizer_settings: tuple[tuple[str, Any], ...] = eqx.field(
        default=(), converter=_settings_tuple
    )
    expert: ExpertName = "none"
    expert_lr_max: float = 1e-2
    expert_lr_min: float = 1e-4
    expert_lr_decay_steps: int = 10_000

    num_particles: int = 8
    truncation_length: int = 50
    sigma: float = 0.01
    loss_reduction: LossReduction = "mean"

    horizon: HorizonName = "log_uniform"
    min_horizon: int = 100
    max_horizon: int = 2000
    curriculum_increment: int = 200
    curriculum_unrolls_per_stage: int = 20
    curriculum_reference_off_by_one: bool = False
    initial_step_offset: int = 1000

    divergence_factor: float = 0.0
    divergence_patience: int = 1

    resume_probability: float = 0.0
    buffer_slots: int = 1
    buffer_stores_xi: bool = True

    supervision: SupervisionName = "progressive"
    fresh_init_expert_warm_start: bool = False
    supervision_start: int = 0
    supervision_end: int = 0
    supervision_start_fraction: float | None = None
    supervision_end_fraction: float | None = None
    trajectory_floor: float = 0.0
    direction_floor: float = 0.0
    magnitude_floor: float = 0.0
    direction_weight: float = 0.7
    magnitude_weight: float = 0.3
    normalize_imitation_deltas: bool = True
    imitation_delta_scale: float = 0.01
    imitation_credit: ImitationCredit = "xi"

    num_outer_steps: int = 100_000
    meta_learning_rate: float = 1e-4
    meta_final_learning_rate: float = 1e-5
    meta_warmup_steps: int = 100
    meta_weight_decay: float = 1e-4
    meta_grad_clip: float = 1.0

    num_devices: int | None = None

    def __check_init__(self):
        if isinstance(self.tasks, str) or not isinstance(self.tasks, tuple) or not self.tasks:
            _fail("tasks", self.tasks, "a non-empty tuple of task names")
        if len(set(self.tasks)) != len(self.tasks):
            _fail("tasks", self.tasks, "a tuple of distinct task names")
        _check_int("batch_size", self.batch_size, 1)
        _check_float("min_param_scale", self.min_param_scale, 0.0, math.inf, open_low=True)
        _check_float("max_param_scale", self.max_param_scale, self.min_param_scale, math.inf)
        _check_choice("optimizer", self.optimizer, OptimizerName)
        settings = self.optimizer_settings
        if not isinstance(settings, tuple) or not all(
            isinstance(kv, tuple) and len(kv) == 2 and isinstance(kv[0], str) for kv in settings
        ):
            _fail("optimizer_settings", settings, "a mapping of keyword arguments of the optimizer")
        _check_choice("expert", self.expert, ExpertName)
        _check_float("expert_lr_max", self.expert_lr_max, 0.0, math.inf)
        _check_float("expert_lr_min", self.expert_lr_min, 0.0, self.expert_lr_max)
        _check_int("expert_lr_decay_steps", self.expert_lr_decay_steps, 2)
        _check_choice("supervision", self.supervision, SupervisionName)
        if self.supervision == "alternating" and self.expert == "none":
            _fail("supervision", self.supervision, "'progressive' when expert = 'none'")
        _check_int("num_particles", self.num_particles, 1)
        _check_int("truncation_length", self.truncation_length, 1)
        _check_float("sigma", self.sigma, 0.0, math.inf, open_low=True)
        _check_choice("loss_reduction", self.loss_reduction, LossReduction)
        _check_choice("horizon", self.horizon, HorizonName)
        _check_int("min_horizon", self.min_horizon, 1)
        _check_int("max_horizon", self.max_horizon, self.min_horizon + 1)
        if self.truncation_length > self.max_horizon:
            _fail(
                "truncation_length",
                self.truncation_length,
                f"at most max_horizon = {self.max_horizon} (a longer truncation would restart "
                "every inner problem within every truncation); lower truncation_length or raise "
                "max_horizon",
            )
        _check_int("curriculum_increment", self.curriculum_increment, 0)
        _check_int("curriculum_unrolls_per_stage", self.curriculum_unrolls_per_stage, 1)
        _check_int("initial_step_offset", self.initial_step_offset, 1)
        _check_float("divergence_factor", self.divergence_factor, 0.0, math.inf)
        if 0.0 < self.divergence_factor <= 1.0:
            _fail("divergence_factor", self.divergence_factor, "0 (off) or a number > 1")
        _check_int("divergence_patience", self.divergence_patience, 1)
        _check_float("resume_probability", self.resume_probability, 0.0, 1.0)
        _check_int("buffer_slots", self.buffer_slots, 1)
        _check_int("supervision_start", self.supervision_start, -1)
        _check_int("supervision_end", self.supervision_end, self.supervision_start)
        fractions = (self.supervision_start_fraction, self.supervision_end_fraction)
        if (fractions[0] is None) != (fractions[1] is None):
            _fail(
                "supervision_end_fraction"
                if fractions[1] is None
                else "supervision_start_fraction",
                None,
                "given together with the other supervision_*_fraction (both or neither)",
            )
        if fractions[0] is not None:
            _check_float("supervision_start_fraction", fractions[0], 0.0, 1.0)
            _check_float("supervision_end_fraction", fractions[1], fractions[0], 1.0)
        _check_choice("imitation_credit", self.imitation_credit, ImitationCredit)
        for name in ("trajectory_floor", "direction_floor", "magnitude_floor"):
            _check_float(name, getattr(self, name), 0.0, 1.0)
        _check_float("direction_weight", self.direction_weight, 0.0, 1.0)
        _check_float("magnitude_weight", self.magnitude_weight, 0.0, 1.0 - self.direction_weight)
        _check_float("imitation_delta_scale", self.imitation_delta_scale, 0.0, math.inf)
        _check_int("num_outer_steps", self.num_outer_steps, 1)
        _check_float("meta_learning_rate", self.meta_learning_rate, 0.0, math.inf)
        _check_float("meta_final_learning_rate", self.meta_final_learning_rate, 0.0, math.inf)
        _check_int("meta_warmup_steps", self.meta_warmup_steps, 0)
        _check_float("meta_weight_decay", self.meta_weight_decay, 0.0, math.inf)
        _check_float("meta_grad_clip", self.meta_grad_clip, 0.0, math.inf, open_low=True)
        if self.num_devices is not None:
            _check_int("num_devices", self.num_devices, 1)
            if self.num_particles % self.num_devices:
                _fail(
                    "num_particles",
                    self.num_particles,
                    f"divisible by num_devices = {self.num_devices} (particles are sharded "
                    "evenly over devices); change num_particles or num_devices",
                )

    def supervision_steps(self) -> tuple[int, int]:
        """The supervision ramp's start and end in outer steps, $(t_s, t_e)$.

        **Returns:**

        `(supervision_start, supervision_end)`, or the fractions of `num_outer_steps` when
        they are given.
        """
        if self.supervision_start_fraction is None or self.supervision_end_fraction is None:
            return self.supervision_start, self.supervision_end
        steps = self.num_outer_steps
        start = round(self.supervision_start_fraction * steps)
        return start, max(start, round(self.supervision_end_fraction * steps))

    def replace(self, **changes: Any) -> "MetaConfig":
        """A copy with some fields changed (validated again).

        **Arguments:**

        - `**changes`: field names and their new values.

        **Returns:**

        A new `MetaConfig`.
        """
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ValueError(
                f"Unknown MetaConfig field(s) {unknown}; known fields: {', '.join(field_names())}."
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config as a JSON-serialisable dict (tuples become lists)."""
        out = {}
        for name in field_names():
            value = getattr(self, name)
            if name == "optimizer_settings":
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value}
            out[name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MetaConfig":
        """Build a config from [`elo.MetaConfig.to_dict`][]'s output (validated).

        **Arguments:**

        - `data`: a dict of field values; missing fields take their defaults.

        **Returns:**

        A `MetaConfig`.
        """
        unknown = sorted(set(data) - set(field_names()))
        if unknown:
            raise ValueError(
                f"Unknown MetaConfig field(s) {unknown}; known fields: {', '.join(field_names())}."
            )
        return cls(**data)


def field_names() -> tuple[str, ...]:
    """Names of all `MetaConfig` fields, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(MetaConfig))
