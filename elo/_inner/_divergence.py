"""Divergence rules: when a finite but failing inner problem is ended, one type per rule.

`MetaConfig.divergence_factor` stays a number (0 turns the rule off);
[`build_divergence_rule`][elo.internal.build_divergence_rule] translates it once per task group.
"""

import abc
import math

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._records import StepRecord


class AbstractDivergenceRule(eqx.Module):
    """Decides, step by step, whether an inner problem diverged, and whether a truncation
    belongs to a failed problem (whose snapshot the resume buffer must not keep)."""

    @abc.abstractmethod
    def update(
        self, steps_over_bound: Int[Array, "2"], task_loss: Float[Array, "2"]
    ) -> tuple[Int[Array, "2"], Bool[Array, ""]]:
        """Count one inner step of both sides of a particle.

        **Arguments:**

        - `steps_over_bound`: each side's count of consecutive steps above the bound so far.
        - `task_loss`: each side's raw task loss at this step.

        **Returns:**

        `(steps_over_bound, diverged)`: the new counts, and whether the problem diverged.
        """

    @abc.abstractmethod
    def failed(
        self, records: StepRecord, steps_over_bound_before: Int[Array, "2"]
    ) -> Bool[Array, ""]:
        """Whether a particle's truncation belongs to a failed problem.

        **Arguments:**

        - `records`: the particle's records of the truncation (leading axis `R`).
        - `steps_over_bound_before`: the counts at the start of the truncation.

        **Returns:**

        A boolean scalar.
        """


class NoDivergenceRule(AbstractDivergenceRule):
    """No divergence rule (the paper and the reference): only non-finite losses or parameters
    end an inner problem early, and every snapshot may be pushed."""

    def update(self, steps_over_bound, task_loss):
        return steps_over_bound, jnp.zeros((), bool)

    def failed(self, records, steps_over_bound_before):
        return jnp.zeros((), bool)


class LossBoundRule(AbstractDivergenceRule):
    """An inner problem diverged when either side's raw task loss stayed above `bound` for
    `patience` consecutive steps. A truncation failed when its problem diverged or went
    non-finite in it, or started above the bound.

    **Attributes:**

    - `bound`: the raw task loss above which a side counts towards divergence
      (`MetaConfig.divergence_factor` times the task's initial loss).
    - `patience`: the consecutive steps above the bound that end the problem
      (`MetaConfig.divergence_patience`).
    """

    bound: float = eqx.field(static=True)
    patience: int = eqx.field(static=True)

    def __check_init__(self):
        if not (math.isfinite(self.bound) and self.bound > 0):
            raise ValueError(
                f"LossBoundRule.bound must be a finite number > 0, got {self.bound}; use "
                "NoDivergenceRule() for no divergence rule."
            )
        if self.patience < 1:
            raise ValueError(f"LossBoundRule.patience must be >= 1, got {self.patience}.")

    def update(self, steps_over_bound, task_loss):
        over = jnp.where(task_loss > self.bound, steps_over_bound + 1, 0)
        return over, jnp.any(over >= self.patience)

    def failed(self, records, steps_over_bound_before):
        return jnp.any(records.diverged | records.nonfinite) | jnp.any(steps_over_bound_before > 0)
