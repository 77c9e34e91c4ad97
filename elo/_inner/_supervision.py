"""How a hand-designed expert supervises meta-training: one type per supervision mode.

Everything that depends on the mode is decided here, and nowhere else:

- the weight $\\alpha$ of the learned optimizer in each particle's trajectory
  (`trajectory_weight`), and its override at an inner step (`step_weight`);
- the per-step meta-loss differences that PES turns into a gradient (`loss_deltas`), and which
  perturbation their imitation part is credited to.

`MetaConfig.supervision` and `MetaConfig.expert` stay flat strings (for JSON, `--set` and
config diffs); [`build_supervision`][elo.internal.build_supervision] translates them once.
"""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._config import ImitationCredit
from ._meta_loss import mix_deltas
from ._records import StepRecord
from ._schedules import SupervisionSchedule, SupervisionWeights


def _antithetic(x: Float[Array, "particles R 2"]) -> Float[Array, "particles R"]:
    """$L^+ - L^-$ of a per-side record."""
    return x[..., 0] - x[..., 1]


class LossDeltas(eqx.Module):
    """The per-step meta-loss differences $L^+_n - L^-_n$ of a task group, split by credit.

    **Attributes:**

    - `accumulated`: credited to the accumulated perturbation $\\xi + \\varepsilon$ (PES).
    - `current`: credited to this truncation's $\\varepsilon$ alone, or `None`.
    """

    accumulated: Float[Array, "particles R"]
    current: Float[Array, "particles R"] | None


class AbstractSupervision(eqx.Module):
    """A supervision mode. Subclasses are final; see the module docstring."""

    records_mse: eqx.AbstractClassVar[bool]
    """Whether inner problems must record the behaviour-cloning loss `imitation_mse`."""

    follow_expert_on_restart: eqx.AbstractVar[bool]
    """The reference's hidden warm start: an inner problem restarted fresh mid-truncation
    follows the pure expert ($\\alpha = 0$) until the truncation ends."""

    @abc.abstractmethod
    def weights(self, outer_step: Int[Array, ""]) -> SupervisionWeights:
        """The schedule's weights at an outer step."""

    @abc.abstractmethod
    def trajectory_weight(
        self, weights: SupervisionWeights, unrolls_done: Int[Array, " particles"]
    ) -> Float[Array, " particles"]:
        """$\\alpha$ of each particle's trajectory for this truncation."""

    @abc.abstractmethod
    def loss_deltas(
        self,
        records: StepRecord,
        weights: SupervisionWeights,
        alpha: Float[Array, " particles"],
        *,
        axis_name: str | None,
    ) -> LossDeltas:
        """The meta-loss differences of a truncation (records with axes `[particles, R]`)."""

    @abc.abstractmethod
    def needs_expert(self, weights: SupervisionWeights) -> bool | Bool[Array, ""]:
        """Whether the expert takes part in an outer step with these weights: its step enters
        a trajectory or an imitation loss. A Python bool where the answer does not depend on
        the outer step (then only one unroll is compiled). Where it is false, the inner
        problems skip the expert (see
        [`InnerProblem.unroll`][elo.internal.InnerProblem.unroll]): the same trajectories up
        to float rounding."""

    def step_weight(
        self, alpha: Float[Array, ""], follow_expert: Bool[Array, ""]
    ) -> Float[Array, ""]:
        """$\\alpha$ at one inner step of a particle: `alpha`, or 0 where the particle follows
        the expert (`follow_expert`, with `follow_expert_on_restart` on)."""
        return jnp.where(follow_expert & self.follow_expert_on_restart, 0.0, alpha)


class NoSupervision(AbstractSupervision):
    """No expert: every trajectory is the learned optimizer's, the meta-loss is the task loss
    (the PES baselines)."""

    records_mse: ClassVar[bool] = False
    follow_expert_on_restart: ClassVar[bool] = False

    def weights(self, outer_step: Int[Array, ""]) -> SupervisionWeights:
        return SupervisionSchedule.none().weights(outer_step)

    def needs_expert(self, weights):
        return False

    def trajectory_weight(self, weights, unrolls_done):
        return jnp.ones(unrolls_done.shape, jnp.float32)

    def loss_deltas(self, records, weights, alpha, *, axis_name):
        return LossDeltas(_antithetic(records.meta_loss), None)


class ProgressiveSupervision(AbstractSupervision):
    """ELO's progressive supervision: every trajectory is fused,
    $(1-\\alpha_t)$ expert $+ \\alpha_t$ learned optimizer, and the meta-loss mixes the direction
    and magnitude imitation losses with the task loss, on the ramps of `schedule`.

    **Attributes:**

    - `schedule`: the [`elo.SupervisionSchedule`][].
    - `normalize_imitation`, `imitation_scale`: see [`elo.mix_deltas`][elo.internal.mix_deltas].
    - `imitation_credit`: `"xi"` (paper) or `"epsilon"` (see `MetaConfig.imitation_credit`).
    - `follow_expert_on_restart`: see
      [`AbstractSupervision`][elo.internal.AbstractSupervision].
    """

    schedule: SupervisionSchedule
    normalize_imitation: bool = eqx.field(static=True)
    imitation_scale: float = eqx.field(static=True)
    imitation_credit: ImitationCredit = eqx.field(static=True)
    follow_expert_on_restart: bool = eqx.field(static=True)
    records_mse: ClassVar[bool] = False

    def weights(self, outer_step):
        return self.schedule.weights(outer_step)

    def needs_expert(self, weights):
        # After the handover (alpha = 1, no imitation weight) the expert's step is multiplied
        # by zero everywhere, unless a restarted problem may follow the expert or a floor keeps
        # some supervision to the end.
        if self.follow_expert_on_restart:
            return True
        s = self.schedule
        floors = (
            s.trajectory_floor,
            s.direction_floor * s.direction_weight,
            s.magnitude_floor * s.magnitude_weight,
        )
        static = [f for f in floors if isinstance(f, int | float)]
        if len(static) == len(floors) and any(f > 0 for f in static):
            return True
        return (weights.alpha < 1) | (weights.direction != 0) | (weights.magnitude != 0)

    def trajectory_weight(self, weights, unrolls_done):
        return jnp.broadcast_to(weights.alpha, unrolls_done.shape)

    def loss_deltas(self, records, weights, alpha, *, axis_name):
        def mixed(w_task, w_dir, w_mag):
            return mix_deltas(
                _antithetic(records.meta_loss),
                _antithetic(records.direction_loss),
                _antithetic(records.magnitude_loss),
                w_task=w_task,
                w_dir=w_dir,
                w_mag=w_mag,
                normalize_imitation=self.normalize_imitation,
                imitation_scale=self.imitation_scale,
                axis_name=axis_name,
            )

        if self.imitation_credit == "xi":
            return LossDeltas(mixed(weights.task, weights.direction, weights.magnitude), None)
        return LossDeltas(
            mixed(weights.task, 0.0, 0.0), mixed(0.0, weights.direction, weights.magnitude)
        )


class AlternatingSupervision(AbstractSupervision):
    """CL-small_fc (Chen et al.): each particle alternates whole unrolls. Even-numbered ones
    clone the expert (pure expert trajectory, $\\alpha = 0$, scored by the per-tensor MSE
    between the two optimizers' steps), odd-numbered ones run the learned optimizer alone
    ($\\alpha = 1$, scored by the task loss). The mode is latched per truncation.

    **Attributes:**

    - `normalize_imitation`, `imitation_scale`: as for `ProgressiveSupervision`.
    - `follow_expert_on_restart`: as for `ProgressiveSupervision`.
    """

    normalize_imitation: bool = eqx.field(static=True)
    imitation_scale: float = eqx.field(static=True)
    follow_expert_on_restart: bool = eqx.field(static=True)
    records_mse: ClassVar[bool] = True

    def weights(self, outer_step):
        return SupervisionSchedule.none().weights(outer_step)

    def needs_expert(self, weights):
        return True

    def trajectory_weight(self, weights, unrolls_done):
        cloning = (unrolls_done % 2 == 0).astype(jnp.float32)
        return 1.0 - cloning

    def loss_deltas(self, records, weights, alpha, *, axis_name):
        cloning = (1.0 - alpha)[:, None]
        deltas = mix_deltas(
            _antithetic(records.meta_loss),
            _antithetic(records.imitation_mse),
            _antithetic(records.magnitude_loss),
            w_task=1.0 - cloning,
            w_dir=cloning,
            w_mag=0.0,
            normalize_imitation=self.normalize_imitation,
            imitation_scale=self.imitation_scale,
            axis_name=axis_name,
        )
        return LossDeltas(deltas, None)
