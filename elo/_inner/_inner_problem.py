"""One particle's pair of antithetic inner problems, and its unroll over one truncation.

A particle owns two inner trajectories, the $+\\varepsilon$ and the $-\\varepsilon$ side. They
share everything random (data batches, resets, resume choices, horizons), so their per-step loss
differences isolate the effect of the perturbation. Both sides are stepped together; a
failure on either side resets both, so pairs never fall out of step.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jaxtyping import Array, Bool, Float, Key

from .._custom_types import PRNGKeyArray, PyTree
from ..optimizers._base import AbstractLearnedOptimizer
from ..tasks import AbstractTask, ParameterScaleAugmentation, ScaledTask
from ._difficulty import difficulty_init, difficulty_reset, difficulty_update
from ._divergence import AbstractDivergenceRule
from ._fusion import fused_step, imitation_losses
from ._horizon import AbstractHorizon
from ._particle import Particle, Restart, Side, Snapshot
from ._records import StepRecord
from ._restarts import AbstractRestarts
from ._supervision import AbstractSupervision


def _tensor_mean_squared_error(expert_delta: PyTree, lo_delta: PyTree) -> Float[Array, ""]:
    """CL-small_fc's imitation loss: the mean over tensors of each tensor's mean squared
    difference between the expert's and the learned optimizer's step."""
    errors = [
        jnp.mean(jnp.square(e - o))
        for e, o in zip(jax.tree.leaves(expert_delta), jax.tree.leaves(lo_delta))
    ]
    return jnp.mean(jnp.stack(errors))


def _where(condition: Bool[Array, ""], if_true: PyTree, if_false: PyTree) -> PyTree:
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


class SideStep(eqx.Module):
    """One inner step of one side: its new state and what the step measured."""

    side: Side
    task_loss: Float[Array, ""]
    meta_loss: Float[Array, ""]
    direction_loss: Float[Array, ""]
    magnitude_loss: Float[Array, ""]
    imitation_mse: Float[Array, ""]
    finite: Bool[Array, ""]


class _TruncationCarry(eqx.Module):
    """What a particle carries from one inner step of a truncation to the next.

    - `new_segment`: a restart happened earlier in this truncation.
    - `restart_xi`: the PES accumulator of the last restarted trajectory.
    - `follow_expert`: a fresh restart happened in this truncation (the reference's warm start).
    """

    particle: Particle
    new_segment: Bool[Array, "*batch"]
    restart_xi: PyTree
    follow_expert: Bool[Array, "*batch"]


class UnrollSettings(eqx.Module):
    """The numbers of [`elo.MetaConfig`][] that an inner problem's unroll reads.

    **Attributes:**

    - `truncation_length`: $R$.
    - `initial_step_offset`: see [`elo.MetaConfig`][].
    """

    truncation_length: int = eqx.field(static=True)
    initial_step_offset: int = eqx.field(static=True)


class InnerProblem(eqx.Module):
    """Everything needed to run one task group's inner problems (no per-particle state).

    **Attributes:**

    - `task`: the inner problem.
    - `lo_static`: the learned optimizer without its weights (`eqx.partition`'s static half).
    - `expert`: the expert optax transformation, or `None` for pure learned-optimizer training.
    - `horizon`: the horizon sampler.
    - `augmentation`: the parameter-scale augmentation, or `None`.
    - `supervision`: the supervision mode (decides each inner step's $\\alpha$).
    - `restarts`: the restart policy (fresh only, or the resume buffer).
    - `divergence`: the divergence rule.
    - `settings`: the [`UnrollSettings`][elo.internal.UnrollSettings].
    """

    task: AbstractTask
    # Both are kept out of the traced program by `eqx.partition(problems, eqx.is_array)` in
    # the meta-step; static here so that an `InnerProblem` is hashable as a whole.
    lo_static: AbstractLearnedOptimizer = eqx.field(static=True)
    expert: optax.GradientTransformation | None = eqx.field(static=True)
    horizon: AbstractHorizon
    augmentation: ParameterScaleAugmentation | None
    supervision: AbstractSupervision
    restarts: AbstractRestarts
    divergence: AbstractDivergenceRule
    settings: UnrollSettings

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

        A [`Particle`][elo.internal.Particle].
        """
        fresh_key, offset_key = jr.split(key)
        zero = jnp.zeros((), jnp.int32)
        sides, scale, horizon = self._fresh(theta, fresh_key, zero)
        step = jr.randint(offset_key, (), 0, self.settings.initial_step_offset, jnp.int32)
        xi = jax.tree.map(jnp.zeros_like, theta)
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
            buffer=self.restarts.empty_buffer(Snapshot(sides, scale, zero, xi)),
        )

    # --------------------------------------------------------------------------------------
    # Training

    def _train_side(self, theta, side: Side, scale, alpha, batch, use_expert: bool) -> SideStep:
        """One inner step of one side: gradient, (fused) optimizer step, imitation losses.
        Without `use_expert` (or an expert), the learned optimizer steps alone, the expert's
        state is kept as it was and the imitation losses are 0."""
        task = self._scaled_task(scale)
        loss, grads = jax.value_and_grad(task.batch_loss)(side.params, batch)
        lo = eqx.combine(theta, self.lo_static)
        zero = jnp.zeros((), jnp.float32)
        l_dir = l_mag = l_mse = zero
        if self.expert is None or not use_expert:
            updates, lo_state = lo.update(grads, side.lo_state, side.params)
            params = jax.tree.map(lambda p, u: p + u, side.params, updates)
            new_side = Side(params, lo_state, side.expert_state)
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
            if self.supervision.records_mse:
                l_mse = _tensor_mean_squared_error(out.expert_delta, out.lo_delta)
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.asarray([jnp.all(jnp.isfinite(p)) for p in jax.tree.leaves(new_side.params)])
        )
        return SideStep(
            side=new_side,
            task_loss=loss,
            meta_loss=task.normalize_loss(loss),
            direction_loss=l_dir,
            magnitude_loss=l_mag,
            imitation_mse=l_mse,
            finite=finite,
        )

    def _train(
        self, theta_pm, carry: _TruncationCarry, alpha, resumed, fresh, batch, use_expert: bool
    ):
        """Train both sides of a particle for one inner step on the same minibatch."""
        p = carry.particle
        step_alpha = self.supervision.step_weight(alpha, carry.follow_expert)
        train = jax.vmap(
            functools.partial(self._train_side, use_expert=use_expert),
            in_axes=(0, 0, None, None, None),
        )
        out = train(theta_pm, p.sides, p.scale, step_alpha, batch)
        inner_step = p.step + 1
        nonfinite = ~jnp.all(out.finite)
        steps_over_bound, over_too_long = self.divergence.update(p.steps_over_bound, out.task_loss)
        diverged = over_too_long & ~nonfinite
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
                out.side,
                difficulty_update(p.difficulty, out.task_loss),
                inner_step,
                p.unrolls_done + done.astype(jnp.int32),
                done,
                steps_over_bound,
            ),
        )
        record = StepRecord(
            meta_loss=out.meta_loss,
            task_loss=out.task_loss,
            direction_loss=out.direction_loss,
            magnitude_loss=out.magnitude_loss,
            imitation_mse=out.imitation_mse,
            new_segment=carry.new_segment,
            resumed=resumed,
            fresh=fresh,
            nonfinite=nonfinite,
            diverged=diverged,
            ended=done,
            step=inner_step,
        )
        return eqx.tree_at(lambda c: c.particle, carry, p), record

    # --------------------------------------------------------------------------------------
    # Resets

    def _restart(self, theta_plus, p: Particle, key) -> Restart:
        """Where the particle restarts, as its restart policy decides."""
        fresh_key, resume_key, pop_key, horizon_key = jr.split(key, 4)
        fresh_sides, fresh_scale, fresh_horizon = self._fresh(theta_plus, fresh_key, p.unrolls_done)
        fresh = Restart(
            sides=fresh_sides,
            scale=fresh_scale,
            step=jnp.zeros((), jnp.int32),
            horizon=fresh_horizon,
            xi=jax.tree.map(jnp.zeros_like, p.xi),
            resumed=jnp.zeros((), bool),
        )
        further_steps = self.horizon.sample(p.unrolls_done, key=horizon_key)
        restart = self.restarts.restart(
            fresh, p, further_steps, resume_key=resume_key, pop_key=pop_key
        )
        # A resumed inner problem runs to a horizon of its own (its step plus a new draw): its
        # learned optimizer's schedule is that horizon's, not the one it was first started
        # with, whose decayed step would be 0 past its end. A fresh one's is unchanged.
        lo = eqx.combine(theta_plus, self.lo_static)
        lo_state = jax.vmap(lo.with_horizon, in_axes=(0, None))(
            restart.sides.lo_state, restart.horizon
        )
        return eqx.tree_at(lambda r: r.sides.lo_state, restart, lo_state)

    def _reset(self, theta_plus, carry: _TruncationCarry, key):
        """Apply a particle's pending reset (a no-op for particles without one)."""
        p = carry.particle
        due = p.pending_reset
        restart = self._restart(theta_plus, p, key)
        p = eqx.tree_at(
            lambda q: (q.sides, q.scale, q.step, q.horizon, q.difficulty, q.steps_over_bound),
            p,
            (
                _where(due, restart.sides, p.sides),
                jnp.where(due, restart.scale, p.scale),
                jnp.where(due, restart.step, p.step).astype(jnp.int32),
                jnp.where(due, restart.horizon, p.horizon).astype(jnp.int32),
                difficulty_reset(p.difficulty, jnp.broadcast_to(due, (2,))),
                jnp.where(due, 0, p.steps_over_bound),
            ),
        )
        resumed = restart.resumed & due
        fresh = due & ~resumed
        carry = _TruncationCarry(
            particle=p,
            new_segment=carry.new_segment | due,
            restart_xi=_where(due, restart.xi, carry.restart_xi),
            follow_expert=carry.follow_expert | fresh,
        )
        return carry, resumed, fresh

    # --------------------------------------------------------------------------------------
    # A truncation

    def unroll(
        self,
        theta_pm: PyTree,
        particles: Particle,
        alpha: Float[Array, " particles"],
        *,
        keys: Key[Array, " particles"],
        use_expert: bool = True,
    ) -> tuple[Particle, StepRecord, PyTree, Snapshot]:
        """Advance a batch of particles by one truncation of $R$ inner steps.

        Every step first applies pending resets (where the restart policy says: fresh, or
        resumed from the buffer), then trains both sides of every particle on the same
        minibatch. An inner problem ends when its horizon is reached, when either side becomes
        non-finite, or when the divergence rule says it diverged. Resets are
        rare, so the reset computation runs only on steps where some particle of the batch needs
        one (a `lax.cond` on the batch, not a select per particle).

        **Arguments:**

        - `theta_pm`: the perturbed weights, with leading axes `[particles, 2]` ($\\theta \\pm
          \\varepsilon$).
        - `particles`: the particles before the truncation (leading axis `particles`).
        - `alpha`: each particle's learned-optimizer weight in the fused trajectory.
        - `keys`: one key per particle for this truncation.
        - `use_expert`: `False` skips the expert where the supervision does not need it
          ([`AbstractSupervision.needs_expert`][elo.internal.AbstractSupervision.needs_expert]):
          the learned optimizer steps alone, which at $\\alpha = 1$ gives the parameters of
          the fused step (up to float rounding: bit for bit on one device, within an ulp when
          the compiler splits the program differently); the expert's states stay as they were
          and the imitation losses are recorded as 0.

        **Returns:**

        `(particles, records, restart_xi, snapshots)`: the particles after the truncation
        (buffers not yet pushed), per-step records with leading axes `[particles, R]`, the
        accumulator of each particle's last restarted trajectory, and the snapshots taken at the
        start of the truncation.
        """
        # A fresh restart only needs the weights' shapes; the + side's are as good as any.
        theta_plus = jax.tree.map(lambda x: x[:, 0], theta_pm)
        snapshots = Snapshot(particles.sides, particles.scale, particles.step, particles.xi)
        num = particles.step.shape[0]
        falses = jnp.zeros((num,), bool)
        reset = jax.vmap(self._reset)
        train = jax.vmap(functools.partial(self._train, use_expert=use_expert))

        # Every step's keys and minibatches are drawn before the loop, all steps at once: the
        # same numbers as drawing them step by step, but on CPU each draw inside the loop is a
        # small loop of its own (JAX rolls threefry's rounds there), run at every inner step.
        def step_keys(n):
            return jax.vmap(lambda k: jr.split(jr.fold_in(k, n)))(keys)

        all_keys = jax.vmap(step_keys)(jnp.arange(self.settings.truncation_length))
        reset_keys, data_keys = all_keys[:, :, 0], all_keys[:, :, 1]
        batches = jax.vmap(jax.vmap(self.task.sample_batch))(data_keys)

        def step(carry: _TruncationCarry, inputs):
            reset_keys, batch = inputs
            carry, resumed, fresh = jax.lax.cond(
                jnp.any(carry.particle.pending_reset),
                lambda c: reset(theta_plus, c, reset_keys),
                lambda c: (c, falses, falses),
                carry,
            )
            return train(theta_pm, carry, alpha, resumed, fresh, batch)

        init = _TruncationCarry(
            particle=particles,
            new_segment=falses,
            restart_xi=jax.tree.map(jnp.zeros_like, particles.xi),
            follow_expert=falses,
        )
        carry, records = jax.lax.scan(step, init, (reset_keys, batches))
        records = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), records)
        return carry.particle, records, carry.restart_xi, snapshots

    def finish_truncation(
        self,
        before: Particle,
        after: Particle,
        records: StepRecord,
        snapshot: Snapshot,
        new_xi: PyTree,
    ) -> Particle:
        """Store the new accumulator, then let the restart policy keep what it needs.

        With the resume buffer, the snapshot taken at the start of the truncation is pushed
        by [`BufferedRestarts.finish_truncation`][elo.internal.BufferedRestarts]'s rule, never
        for a truncation the divergence rule calls failed (a failing run is not a hard state
        worth resuming).

        **Arguments:**

        - `before`, `after`: the particle at the start and at the end of the truncation.
        - `records`: the truncation's per-step records.
        - `snapshot`: the snapshot taken at the start of the truncation.
        - `new_xi`: the accumulator after the PES update.

        **Returns:**

        The particle ready for the next truncation.
        """
        after = eqx.tree_at(lambda p: p.xi, after, new_xi)
        failed = self.divergence.failed(records, before.steps_over_bound)
        return self.restarts.finish_truncation(before, after, records, snapshot, failed)
