"""Restart policies: where an ended inner problem starts again, one type per policy.

`MetaConfig.resume_probability` stays a number (0: fresh restarts only);
[`build_restarts`][elo.internal.build_restarts] translates it once.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int

from .._custom_types import PRNGKeyArray, PyTree
from ._buffer import buffer_pop, buffer_push, resume_decision, ResumeBuffer, should_push
from ._particle import Particle, Restart, Snapshot
from ._records import StepRecord


def _where(condition: Bool[Array, ""], if_true: PyTree, if_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


class AbstractRestarts(eqx.Module):
    """A restart policy: what a particle keeps to restart from, where it restarts, and what it
    keeps after each truncation."""

    @abc.abstractmethod
    def empty_buffer(self, example: Snapshot) -> ResumeBuffer | None:
        """The resume buffer of a new particle (`None`: the policy keeps none).

        **Arguments:**

        - `example`: a snapshot of the particle's inner problems (only its structure is used).

        **Returns:**

        An empty [`elo.ResumeBuffer`][], or `None`.
        """

    @abc.abstractmethod
    def restart(
        self,
        fresh: Restart,
        particle: Particle,
        further_steps: Int[Array, ""],
        *,
        resume_key: PRNGKeyArray,
        pop_key: PRNGKeyArray,
    ) -> Restart:
        """Where a particle whose inner problem ended restarts.

        **Arguments:**

        - `fresh`: a fresh start (new task scale, parameters, optimizer states and horizon).
        - `particle`: the particle.
        - `further_steps`: a freshly sampled horizon, the length a resumed problem runs on for.
        - `resume_key`, `pop_key`: keys for the decision to resume and for the snapshot drawn.

        **Returns:**

        The [`Restart`][elo.internal.Restart].
        """

    @abc.abstractmethod
    def finish_truncation(
        self,
        before: Particle,
        after: Particle,
        records: StepRecord,
        snapshot: Snapshot,
        failed: Bool[Array, ""],
    ) -> Particle:
        """Keep what the policy needs from a finished truncation.

        **Arguments:**

        - `before`, `after`: the particle at the start and at the end of the truncation.
        - `records`: the particle's records of the truncation (leading axis `R`).
        - `snapshot`: the snapshot taken at the start of the truncation.
        - `failed`: whether the truncation belongs to a failed problem (see
          [`AbstractDivergenceRule.failed`][elo.internal.AbstractDivergenceRule.failed]).

        **Returns:**

        The particle `after`, updated.
        """


class FreshRestarts(AbstractRestarts):
    """Every ended inner problem restarts fresh; particles keep no buffer (the PES baselines,
    `MetaConfig.resume_probability = 0`)."""

    def empty_buffer(self, example):
        return None

    def restart(self, fresh, particle, further_steps, *, resume_key, pop_key):
        return fresh

    def finish_truncation(self, before, after, records, snapshot, failed):
        return after


def _buffer_of(particle: Particle) -> ResumeBuffer:
    if particle.buffer is None:
        raise ValueError(
            "BufferedRestarts needs particles with a resume buffer, got one without; build the "
            "particles with the init_particle of the InnerProblem that restarts them."
        )
    return particle.buffer


class BufferedRestarts(AbstractRestarts):
    """ELO's failure-aware resume buffer: an ended inner problem resumes from a stored
    snapshot with probability $P_B$ (for a freshly sampled further length), else restarts
    fresh; after each truncation the snapshot taken at its start is pushed by
    [`elo.should_push`][]'s rule.

    **Attributes:**

    - `resume_probability`: $P_B > 0$.
    - `num_slots`: the buffer's capacity per particle (`MetaConfig.buffer_slots`).
    - `stores_xi`: a resumed problem continues with the stored PES accumulator instead of a
      zero one (`MetaConfig.buffer_stores_xi`).
    """

    resume_probability: float = eqx.field(static=True)
    num_slots: int = eqx.field(static=True)
    stores_xi: bool = eqx.field(static=True)

    def __check_init__(self):
        if not 0.0 < self.resume_probability <= 1.0:
            raise ValueError(
                f"BufferedRestarts.resume_probability must lie in (0, 1], got "
                f"{self.resume_probability}; use FreshRestarts() for fresh restarts only."
            )

    def empty_buffer(self, example):
        return ResumeBuffer.empty(example, self.num_slots)

    def restart(self, fresh, particle, further_steps, *, resume_key, pop_key):
        buffer = _buffer_of(particle)
        resume = resume_decision(buffer, self.resume_probability, key=resume_key)
        snap, _ = buffer_pop(buffer, key=pop_key)
        resumed = Restart(
            sides=snap.sides,
            scale=snap.scale,
            step=snap.step,
            horizon=snap.step + further_steps,
            xi=snap.xi if self.stores_xi else fresh.xi,
            resumed=jnp.ones((), bool),
        )
        return _where(resume, resumed, fresh)

    def finish_truncation(self, before, after, records, snapshot, failed):
        """Push the snapshot when the running maximum of the difficulty score (mean of both
        sides) rose during the truncation, or when an inner problem ended in it, unless the
        truncation `failed`; then align both sides' running maxima to their mean."""
        max_before = jnp.mean(before.difficulty.max_score)
        max_after = jnp.mean(after.difficulty.max_score)
        ended = jnp.any(records.ended)
        push = should_push(max_before, max_after, ended, failed)
        buffer = buffer_push(_buffer_of(after), snapshot, push)
        aligned = jnp.broadcast_to(max_after, (2,))
        return eqx.tree_at(lambda p: (p.buffer, p.difficulty.max_score), after, (buffer, aligned))
