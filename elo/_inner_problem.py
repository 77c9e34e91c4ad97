"""One particle's pair of antithetic inner problems, and its unroll over one truncation.

A particle owns two inner trajectories, the $+\\varepsilon$ and the $-\\varepsilon$ side. They
share everything random (data batches, resets, resume choices, horizons), so their per-step loss
differences isolate the effect of the perturbation. Both sides are stepped together; a
divergence on either side resets both, so pairs never fall out of step.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Bool, Float, Int, Key

from ._buffer import buffer_pop, buffer_push, resume_decision, ResumeBuffer, should_push
from ._custom_types import PRNGKeyArray, PyTree
from ._difficulty import difficulty_init, difficulty_reset, difficulty_update, DifficultyState
from ._fusion import fused_step, imitation_losses
from ._horizon import AbstractHorizon
from .optimizers._base import AbstractLearnedOptimizer
from .tasks import AbstractTask, ParameterScaleAugmentation, ScaledTask


def _tensor_mean_squared_error(expert_delta: PyTree, lo_delta: PyTree) -> Float[Array, ""]:
    """CL-small_fc's imitation loss: the mean over tensors of each tensor's mean squared
    difference between the expert's and the learned optimizer's step."""
    errors = [
        jnp.mean(jnp.square(e - o))
        for e, o in zip(jax.tree.leaves(expert_delta), jax.tree.leaves(lo_delta))
    ]
    return jnp.mean(jnp.stack(errors))


class Side(eqx.Module):
    """The state of one inner trajectory that a snapshot must carry to resume it."""

    params: PyTree
    lo_state: PyTree
    expert_state: PyTree


class Snapshot(eqx.Module):
    """What the resume buffer stores: both sides, the task scale, the inner step and $\\xi$."""

    sides: Side
    scale: Float[Array, "*batch"]
    step: Int[Array, "*batch"]
    xi: PyTree


class Particle(eqx.Module):
    """A particle: two antithetic inner trajectories plus their shared bookkeeping.

    `sides` and `difficulty` have a leading axis of size 2 ($+$, $-$).
    """

    sides: Side
    difficulty: DifficultyState
    scale: Float[Array, "*batch"]
    step: Int[Array, "*batch"]
    horizon: Int[Array, "*batch"]
    unrolls_done: Int[Array, "*batch"]
    pending_reset: Bool[Array, "*batch"]
    steps_over_bound: Int[Array, "*batch 2"]
    xi: PyTree
    buffer: ResumeBuffer | None


class StepRecord(eqx.Module):
    """Per-step outputs of both sides (leading axis 2 where it applies)."""

    task_loss: Float[Array, "*batch 2"]
    raw_loss: Float[Array, "*batch 2"]
    direction_loss: Float[Array, "*batch 2"]
    magnitude_loss: Float[Array, "*batch 2"]
    imitation_mse: Float[Array, "*batch 2"]
    new_segment: Bool[Array, "*batch"]
    resumed: Bool[Array, "*batch"]
    fresh: Bool[Array, "*batch"]
    nonfinite: Bool[Array, "*batch"]
    diverged: Bool[Array, "*batch"]
    ended: Bool[Array, "*batch"]
    step: Int[Array, "*batch"]


class InnerProblem(eqx.Module):
    """Everything needed to run one task group's inner problems (no per-particle state).

    **Attributes:**

    - `task`: the inner problem.
    - `lo_static`: the learned optimizer without its weights (`eqx.partition`'s static half).
    - `expert`: the expert optax transformation, or `None` for pure learned-optimizer training.
    - `horizon`: the horizon sampler.
    - `augmentation`: the parameter-scale augmentation, or `None`.
    - `truncation_length`: $R$.
    - `resume_probability`: $P_B$ (a buffer exists only when it is positive).
    - `buffer_slots`, `buffer_stores_xi`: see [`elo.MetaConfig`][].
    - `initial_step_offset`: see [`elo.MetaConfig`][].
    - `imitation`: `"progressive"` or `"alternating"` (see `MetaConfig.supervision`); the latter
      also records the MSE imitation loss.
    - `fresh_init_expert_warm_start`: see [`elo.MetaConfig`][].
    - `divergence_bound`: the raw task loss above which a side counts towards divergence
      (`inf`: the divergence rule is off; see `MetaConfig.divergence_factor`).
    - `divergence_patience`: consecutive steps above the bound that end the unroll.
    """

    task: AbstractTask
    lo_static: AbstractLearnedOptimizer = eqx.field(static=True)
    expert: optax.GradientTransformation | None = eqx.field(static=True)
    horizon: AbstractHorizon
    augmentation: ParameterScaleAugmentation | None
    truncation_length: int = eqx.field(static=True)
    resume_probability: float = eqx.field(static=True)
    buffer_slots: int = eqx.field(static=True)
    buffer_stores_xi: bool = eqx.field(static=True)
    initial_step_offset: int = eqx.field(static=True)
    imitation: str = eqx.field(static=True, default="progressive")
    fresh_init_expert_warm_start: bool = eqx.field(static=True, default=False)
    divergence_bound: float = eqx.field(static=True, default=math.inf)
    divergence_patience: int = eqx.field(static=True, default=1)

    @property
    def uses_buffer(self) -> bool:
        return self.resume_probability > 0.0

    @property
    def resets_diverged(self) -> bool:
        return math.isfinite(self.divergence_bound)

    def _scaled_task(self, scale) -> AbstractTask:
        return self.task if self.augmentation is None else ScaledTask(self.task, scale)

    def _fresh(self, theta, key, unrolls_done):
        """A fresh inner problem: new scale, new parameters, new optimizer states, new horizon."""
        scale_key, init_key, horizon_key = jr.split(key, 3)
        if self.augmentation is None:
            scale = jnp.ones((), jnp.float32)
        else:
            scale = self.augmentation.sample_scale(scale_key)
        params = self._scaled_task(scale).init(init_key)
        horizon = self.horizon.sample(unrolls_done, key=horizon_key)
        lo = eqx.combine(theta, self.lo_static)
        lo_state = lo.init(params, horizon)
        expert_state = () if self.expert is None else self.expert.init(params)
        side = Side(params, lo_state, expert_state)
        sides = jax.tree.map(lambda x: jnp.stack([x, x]), side)
        return sides, scale, horizon

    def init_particle(self, theta: PyTree, *, key: PRNGKeyArray) -> Particle:
        """A particle at the start of meta-training: fresh inner problems at a random inner step.

        **Arguments:**

        - `theta`: the learned optimizer's weights (only used for shapes).
        - `key`: a JAX PRNG key.

        **Returns:**

        A [`elo._inner_problem.Particle`][].
        """
        fresh_key, offset_key = jr.split(key)
        zero = jnp.zeros((), jnp.int32)
        sides, scale, horizon = self._fresh(theta, fresh_key, zero)
        step = jr.randint(offset_key, (), 0, self.initial_step_offset, jnp.int32)
        xi = jax.tree.map(jnp.zeros_like, theta)
        buffer = None
        if self.uses_buffer:
            example = Snapshot(sides, scale, zero, xi)
            buffer = ResumeBuffer.empty(example, self.buffer_slots)
        return Particle(
            sides=sides,
            difficulty=difficulty_init((2,)),
            scale=scale,
            step=step,
            horizon=horizon,
            unrolls_done=zero,
            pending_reset=jnp.zeros((), bool),
            steps_over_bound=jnp.zeros((2,), jnp.int32),
            xi=xi,
            buffer=buffer,
        )

    def _train_side(self, theta, side: Side, scale, alpha, key):
        """One inner step of one side: gradient, (fused) optimizer step, imitation losses."""
        task = self._scaled_task(scale)
        loss, grads = jax.value_and_grad(task.loss)(side.params, key)
        lo = eqx.combine(theta, self.lo_static)
        if self.expert is None:
            updates, lo_state = lo.update(grads, side.lo_state, side.params)
            params = jax.tree.map(lambda p, u: p + u, side.params, updates)
            new_side = Side(params, lo_state, side.expert_state)
            l_dir = l_mag = l_mse = jnp.zeros((), jnp.float32)
        else:
            out = fused_step(
                self.expert, lo, alpha, grads, side.expert_state, side.lo_state, side.params
            )
            new_side = Side(out.params, out.lo_state, out.expert_state)
            l_dir, l_mag = imitation_losses(
                out.expert_delta,
                out.lo_delta,
                magnitude=lo.imitation_magnitude,
                include=lo.imitation_leaves(side.params),
            )
            l_mse = jnp.zeros((), jnp.float32)
            if self.imitation == "alternating":
                l_mse = _tensor_mean_squared_error(out.expert_delta, out.lo_delta)
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.asarray([jnp.all(jnp.isfinite(p)) for p in jax.tree.leaves(new_side.params)])
        )
        return new_side, loss, task.normalize_loss(loss), l_dir, l_mag, l_mse, finite

    def _reset(self, theta_one, carry, key):
        """Apply a particle's pending reset: a fresh start with probability $1 - P_B$, else a
        resume from the buffer for a freshly sampled further length."""
        p, started, restart_xi, warm = carry
        fresh_key, resume_key, pop_key, horizon_key = jr.split(key, 4)
        zeros_xi = jax.tree.map(jnp.zeros_like, p.xi)
        fresh_sides, fresh_scale, fresh_horizon = self._fresh(theta_one, fresh_key, p.unrolls_done)
        do_reset = p.pending_reset
        if self.uses_buffer:
            assert p.buffer is not None
            resume = resume_decision(p.buffer, self.resume_probability, key=resume_key)
            snap, _ = buffer_pop(p.buffer, key=pop_key)
            extra = self.horizon.sample(p.unrolls_done, key=horizon_key)
            reset_sides = jax.tree.map(
                lambda a, b: jnp.where(resume, a, b), snap.sides, fresh_sides
            )
            reset_scale = jnp.where(resume, snap.scale, fresh_scale)
            reset_step = jnp.where(resume, snap.step, 0)
            reset_horizon = jnp.where(resume, snap.step + extra, fresh_horizon)
            resumed_xi = snap.xi if self.buffer_stores_xi else zeros_xi
            reset_xi = jax.tree.map(lambda a, b: jnp.where(resume, a, b), resumed_xi, zeros_xi)
        else:
            resume = jnp.zeros((), bool)
            reset_sides, reset_scale = fresh_sides, fresh_scale
            reset_step, reset_horizon, reset_xi = 0, fresh_horizon, zeros_xi
        resume = resume & do_reset
        p = eqx.tree_at(
            lambda q: (q.sides, q.scale, q.step, q.horizon, q.difficulty, q.steps_over_bound),
            p,
            (
                jax.tree.map(lambda a, b: jnp.where(do_reset, a, b), reset_sides, p.sides),
                jnp.where(do_reset, reset_scale, p.scale),
                jnp.where(do_reset, reset_step, p.step).astype(jnp.int32),
                jnp.where(do_reset, reset_horizon, p.horizon).astype(jnp.int32),
                difficulty_reset(p.difficulty, jnp.broadcast_to(do_reset, (2,))),
                jnp.where(do_reset, 0, p.steps_over_bound),
            ),
        )
        restart_xi = jax.tree.map(lambda a, b: jnp.where(do_reset, a, b), reset_xi, restart_xi)
        fresh = do_reset & ~resume
        return (p, started | do_reset, restart_xi, warm | fresh), resume, fresh

    def _train(self, theta_pm, carry, alpha, resumed, fresh, key):
        """Train both sides of a particle for one inner step on the same minibatch."""
        p, started, restart_xi, warm = carry
        step_alpha = alpha
        if self.fresh_init_expert_warm_start:
            # The reference's hidden warm start: a fresh inner problem follows the pure expert
            # until the next truncation boundary.
            step_alpha = jnp.where(warm, 0.0, alpha)
        train = jax.vmap(self._train_side, in_axes=(0, 0, None, None, None))
        sides, raw, normalized, l_dir, l_mag, l_mse, finite = train(
            theta_pm, p.sides, p.scale, step_alpha, key
        )
        inner_step = p.step + 1
        nonfinite = ~jnp.all(finite)
        steps_over_bound = p.steps_over_bound
        diverged = jnp.zeros((), bool)
        if self.resets_diverged:
            steps_over_bound = jnp.where(raw > self.divergence_bound, steps_over_bound + 1, 0)
            diverged = jnp.any(steps_over_bound >= self.divergence_patience) & ~nonfinite
        done = self.horizon.is_done(inner_step, p.horizon) | nonfinite | diverged
        p = eqx.tree_at(
            lambda q: (
                q.sides,
                q.difficulty,
                q.step,
                q.unrolls_done,
                q.pending_reset,
                q.steps_over_bound,
            ),
            p,
            (
                sides,
                difficulty_update(p.difficulty, raw),
                inner_step,
                p.unrolls_done + done.astype(jnp.int32),
                done,
                steps_over_bound,
            ),
        )
        record = StepRecord(
            task_loss=normalized,
            raw_loss=raw,
            direction_loss=l_dir,
            magnitude_loss=l_mag,
            imitation_mse=l_mse,
            new_segment=started,
            resumed=resumed,
            fresh=fresh,
            nonfinite=nonfinite,
            diverged=diverged,
            ended=done,
            step=inner_step,
        )
        return (p, started, restart_xi, warm), record

    def unroll(
        self,
        theta_pm: PyTree,
        particles: Particle,
        alpha: Float[Array, " particles"],
        *,
        keys: Key[Array, " particles"],
    ) -> tuple[Particle, StepRecord, PyTree, Snapshot]:
        """Advance a batch of particles by one truncation of $R$ inner steps.

        Every step first applies pending resets (fresh start with probability $1 - P_B$, else a
        resume from the buffer for a freshly sampled further length), then trains both sides of
        every particle on the same minibatch. An inner problem ends when its horizon is reached,
        when either side becomes non-finite, or (with the divergence rule on) when either side's
        raw loss has stayed above `divergence_bound` for `divergence_patience` steps. Resets are
        rare, so the reset computation runs only on steps where some particle of the batch needs
        one (a `lax.cond` on the batch, not a select per particle).

        **Arguments:**

        - `theta_pm`: the perturbed weights, with leading axes `[particles, 2]` ($\\theta \\pm
          \\varepsilon$).
        - `particles`: the particles before the truncation (leading axis `particles`).
        - `alpha`: each particle's learned-optimizer weight in the fused trajectory.
        - `keys`: one key per particle for this truncation.

        **Returns:**

        `(particles, records, restart_xi, snapshots)`: the particles after the truncation
        (buffers not yet pushed), per-step records with leading axes `[particles, R]`, the
        accumulator of each particle's last restarted trajectory, and the snapshots taken at the
        start of the truncation.
        """
        theta_one = jax.tree.map(lambda x: x[:, 0], theta_pm)
        snapshots = Snapshot(particles.sides, particles.scale, particles.step, particles.xi)
        zeros_xi = jax.tree.map(jnp.zeros_like, particles.xi)
        num = particles.step.shape[0]
        falses = jnp.zeros((num,), bool)
        reset = jax.vmap(self._reset)
        train = jax.vmap(self._train)

        def step(carry, n):
            step_keys = jax.vmap(lambda k: jr.split(jr.fold_in(k, n)))(keys)
            reset_keys, data_keys = step_keys[:, 0], step_keys[:, 1]
            carry, resumed, fresh = jax.lax.cond(
                jnp.any(carry[0].pending_reset),
                lambda c: reset(theta_one, c, reset_keys),
                lambda c: (c, falses, falses),
                carry,
            )
            return train(theta_pm, carry, alpha, resumed, fresh, data_keys)

        init = (particles, falses, zeros_xi, falses)
        (particles, _, restart_xi, _), records = jax.lax.scan(
            step, init, jnp.arange(self.truncation_length)
        )
        records = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), records)
        return particles, records, restart_xi, snapshots

    def finish_truncation(
        self,
        before: Particle,
        after: Particle,
        records: StepRecord,
        snapshot: Snapshot,
        new_xi: PyTree,
    ) -> Particle:
        """Store the new accumulator and apply the buffer's push rule.

        The snapshot taken at the start of the truncation is pushed when the running maximum of
        the difficulty score (mean of both sides) rose during the truncation, or when an inner
        problem ended in it; with the divergence rule on, never when a problem diverged or went
        non-finite in it, nor when it started above the divergence bound (a failing run is not a
        hard state worth resuming). Both sides' running
        maxima are then aligned to their mean.

        **Arguments:**

        - `before`, `after`: the particle at the start and at the end of the truncation.
        - `records`: the truncation's per-step records.
        - `snapshot`: the snapshot taken at the start of the truncation.
        - `new_xi`: the accumulator after the PES update.

        **Returns:**

        The particle ready for the next truncation.
        """
        after = eqx.tree_at(lambda p: p.xi, after, new_xi)
        if not self.uses_buffer:
            return after
        assert after.buffer is not None
        max_before = jnp.mean(before.difficulty.max_score)
        max_after = jnp.mean(after.difficulty.max_score)
        ended = jnp.any(records.ended)
        push = should_push(max_before, max_after, ended)
        if self.resets_diverged:
            failed = jnp.any(records.diverged | records.nonfinite)
            push = push & ~failed & ~jnp.any(before.steps_over_bound > 0)
        buffer = buffer_push(after.buffer, snapshot, push)
        aligned = jnp.broadcast_to(max_after, (2,))
        return eqx.tree_at(lambda p: (p.buffer, p.difficulty.max_score), after, (buffer, aligned))
