"""`meta_step`: one outer step of meta-training as one compiled program."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jax.sharding import PartitionSpec as P

from ._custom_types import PRNGKeyArray
from ._inner_problem import InnerProblem, Particle
from ._mesh import constrain, PARTICLE_AXIS, particle_mesh
from ._meta_loss import mix_deltas
from ._pes import pes_combine, sample_perturbation
from ._state import build_meta_optimizer, build_schedule, MetaState, Metrics


def _group_step(problem: InnerProblem, theta, particles: Particle, weights, config, key):
    """PES over one task group's local particles (inside `shard_map`)."""
    local = jax.tree.leaves(particles.step)[0].shape[0]
    first = jax.lax.axis_index(PARTICLE_AXIS) * local
    keys = jax.vmap(lambda i: jr.fold_in(key, i))(first + jnp.arange(local))
    eps_keys, unroll_keys = jax.vmap(jr.split, out_axes=1)(keys)

    eps = jax.vmap(lambda k: sample_perturbation(theta, key=k, sigma=config.sigma))(eps_keys)
    theta_pm = jax.tree.map(lambda t, e: jnp.stack([t[None] + e, t[None] - e], axis=1), theta, eps)

    alternating = config.supervision == "alternating" and config.expert != "none"
    if alternating:
        # CL-small_fc: even-numbered unrolls of a particle are behaviour cloning (pure expert,
        # imitation loss), odd ones pure learned optimizer (task loss); latched per truncation.
        cloning = (particles.unrolls_done % 2 == 0).astype(jnp.float32)
        alpha = 1.0 - cloning
    else:
        alpha = jnp.broadcast_to(weights.alpha, (local,))

    after, records, restart_xi, snapshot = problem.unroll(
        theta_pm, particles, alpha, keys=unroll_keys
    )

    mask = jnp.ones(records.new_segment.shape, bool)

    def antithetic(x):
        return x[..., 0] - x[..., 1]

    if alternating:
        imitation, w_imitation = records.imitation_mse, cloning[:, None]
        w_task, w_mag = 1.0 - cloning[:, None], 0.0
    else:
        imitation, w_imitation = records.direction_loss, weights.direction
        w_task, w_mag = weights.task, weights.magnitude

    def mixed(w_task, w_dir, w_mag):
        return mix_deltas(
            antithetic(records.task_loss),
            antithetic(imitation),
            antithetic(records.magnitude_loss),
            mask,
            w_task=w_task,
            w_dir=w_dir,
            w_mag=w_mag,
            normalize_imitation=config.normalize_imitation_deltas,
            imitation_scale=config.imitation_delta_scale,
            axis_name=PARTICLE_AXIS,
        )

    combine = jax.vmap(
        lambda d, m, s, e, x, xr: pes_combine(
            d, m, s, e, x, xr, sigma=config.sigma, reduction=config.loss_reduction
        )
    )
    if config.imitation_credit == "xi":
        deltas = mixed(w_task, w_imitation, w_mag)
        grads, new_xi = combine(deltas, mask, records.new_segment, eps, particles.xi, restart_xi)
    else:
        # Imitation deltas credited to this truncation's epsilon alone (zero accumulators);
        # pes_combine is linear in the deltas, so the two parts add up to one estimate.
        grads, new_xi = combine(
            mixed(w_task, 0.0, 0.0), mask, records.new_segment, eps, particles.xi, restart_xi
        )
        zeros = jax.tree.map(jnp.zeros_like, particles.xi)
        imitation_grads, _ = combine(
            mixed(0.0, w_imitation, w_mag), mask, records.new_segment, eps, zeros, zeros
        )
        grads = jax.tree.map(jnp.add, grads, imitation_grads)
    particles = jax.vmap(problem.finish_truncation)(particles, after, records, snapshot, new_xi)

    total = config.num_particles

    def psum_mean(x):
        return jax.lax.psum(jnp.sum(x, axis=0), PARTICLE_AXIS) / total

    grad = jax.tree.map(psum_mean, grads)
    count = lambda x: jax.lax.psum(jnp.sum(x), PARTICLE_AXIS)  # noqa: E731
    stats = dict(
        meta_loss=psum_mean(jnp.mean(records.task_loss, axis=(1, 2))),
        task_loss=psum_mean(jnp.mean(records.raw_loss, axis=(1, 2))),
        resets=count(records.resumed | records.fresh),
        fresh_resets=count(records.fresh),
        buffer_resumes=count(records.resumed),
        max_inner_step=jax.lax.pmax(jnp.max(records.step), PARTICLE_AXIS),
        mean_inner_step=psum_mean(particles.step.astype(jnp.float32)),
        nonfinite=count(records.nonfinite),
        diverged=count(records.diverged),
        direction_loss=psum_mean(jnp.mean(records.direction_loss, axis=(1, 2))),
        magnitude_loss=psum_mean(jnp.mean(records.magnitude_loss, axis=(1, 2))),
        imitation_mse=psum_mean(jnp.mean(records.imitation_mse, axis=(1, 2))),
        alpha=psum_mean(alpha),
    )
    return grad, particles, stats


def meta_step(state: MetaState, key: PRNGKeyArray) -> MetaState:
    """One outer step of meta-training.

    For every task group and every particle, both antithetic inner problems advance by one
    truncation of $R$ inner steps (resetting or resuming from the buffer when a horizon ends);
    the PES estimate of each group is reduced over devices, averaged over groups, clipped, and
    applied by the meta-optimizer. All of it is one compiled program: the second and later calls
    with a state from the same run do not retrace.

    **Arguments:**

    - `state`: the current [`elo.MetaState`][].
    - `key`: a JAX PRNG key for this step (e.g. `jax.random.fold_in(key, t)`).

    **Returns:**

    The next [`elo.MetaState`][]; `state.metrics` describes the step just taken.
    """
    lo, meta_opt_state, groups, step, metrics = _compiled_meta_step(state, key)
    return MetaState(
        config=state.config,
        learned_optimizer=lo,
        meta_opt_state=meta_opt_state,
        groups=groups,
        problems=state.problems,
        step=step,
        metrics=metrics,
    )


@eqx.filter_jit
def _compiled_meta_step(state: MetaState, key: PRNGKeyArray):
    config = state.config
    mesh = particle_mesh(config)
    theta, lo_static = eqx.partition(state.learned_optimizer, eqx.is_inexact_array)
    weights = build_schedule(config).weights(state.step)
    problems_dyn, problems_static = eqx.partition(state.problems, eqx.is_array)

    def per_shard(theta, groups, problems_dyn, weights, key):
        problems = eqx.combine(problems_dyn, problems_static)
        grads, new_groups, stats = [], [], []
        for index, (problem, particles) in enumerate(zip(problems, groups)):
            g, p, s = _group_step(
                problem, theta, particles, weights, config, jr.fold_in(key, index)
            )
            grads.append(g)
            new_groups.append(p)
            stats.append(s)
        num = len(grads)
        grad = jax.tree.map(lambda *gs: sum(gs) / num, *grads)
        merged = {}
        for name in stats[0]:
            values = jnp.stack([s[name] for s in stats])
            if name in ("max_inner_step",):
                merged[name] = jnp.max(values)
            elif name in ("resets", "fresh_resets", "buffer_resumes", "nonfinite", "diverged"):
                merged[name] = jnp.sum(values).astype(jnp.int32)
            else:
                merged[name] = jnp.mean(values)
        return grad, tuple(new_groups), merged

    sharded = jax.shard_map(
        per_shard,
        mesh=mesh,
        in_specs=(P(), P(PARTICLE_AXIS), P(), P(), P()),
        out_specs=(P(), P(PARTICLE_AXIS), P()),
        check_vma=False,
    )
    grad, groups, stats = sharded(theta, state.groups, problems_dyn, weights, key)
    # A non-finite estimate (e.g. an overflowing loss difference) must not poison the weights:
    # it is counted, then zeroed, as the reference does.
    nonfinite_grads = sum(jnp.sum(~jnp.isfinite(g)) for g in jax.tree.leaves(grad))
    grad = jax.tree.map(lambda g: jnp.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0), grad)
    meta_opt = build_meta_optimizer(config)
    updates, meta_opt_state = meta_opt.update(grad, state.meta_opt_state, theta)
    theta = optax.apply_updates(theta, updates)
    metrics = Metrics(
        meta_loss=stats["meta_loss"],
        task_loss=stats["task_loss"],
        grad_norm=jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad))),
        resets=stats["resets"],
        fresh_resets=stats["fresh_resets"],
        buffer_resumes=stats["buffer_resumes"],
        max_inner_step=stats["max_inner_step"].astype(jnp.int32),
        mean_inner_step=stats["mean_inner_step"],
        nonfinite=stats["nonfinite"],
        diverged=stats["diverged"],
        nonfinite_grads=jnp.asarray(nonfinite_grads, jnp.int32),
        alpha=stats["alpha"],
        direction_loss=stats["direction_loss"],
        magnitude_loss=stats["magnitude_loss"],
        imitation_mse=stats["imitation_mse"],
    )
    theta, meta_opt_state, step, metrics = constrain(
        (theta, meta_opt_state, state.step + 1, metrics), mesh, sharded=False
    )
    groups = constrain(groups, mesh, sharded=True)
    return eqx.combine(theta, lo_static), meta_opt_state, groups, step, metrics
