"""`meta_step`: one outer step of meta-training as one compiled program.

Read it top-down: `meta_step` → `_compiled_meta_step` (supervision weights, the sharded
meta-gradient, the meta-update, the metrics) → `_group_step`, one task group's PES estimate as a
named sequence: keys → antithetic perturbation → $\\alpha$ → unroll → loss deltas → PES estimate
→ finish the truncation.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Int, Key

from .._checks import check_key
from .._config import MetaConfig
from .._custom_types import BoolScalar, PRNGKeyArray, PyTree
from .._inner._inner_problem import InnerProblem
from .._inner._particle import Particle
from .._inner._records import StepRecord
from .._inner._schedules import SupervisionWeights
from .._inner._supervision import LossDeltas
from .._runtime._cpu import single_cpu_device_compiler_options
from .._runtime._mesh import constrain, PARTICLE_AXIS, particle_devices, particle_mesh
from ._build import build_meta_optimizer, build_supervision
from ._pes import pes_combine, sample_perturbation
from ._state import MetaState, Metrics
from ._step_stats import group_metrics, merge_groups


class _ParticleKeys(eqx.Module):
    perturbation: Key[Array, " particles"]
    unroll: Key[Array, " particles"]


def _particle_keys(key: PRNGKeyArray, particles: Particle) -> _ParticleKeys:
    """One key per local particle, folded from its *global* index, so that a particle draws
    the same numbers whatever the number of devices it is sharded over."""
    local = particles.step.shape[0]
    first = jax.lax.axis_index(PARTICLE_AXIS) * local
    keys = jax.vmap(lambda i: jr.fold_in(key, i))(first + jnp.arange(local))
    perturbation, unroll = jax.vmap(jr.split, out_axes=1)(keys)
    return _ParticleKeys(perturbation, unroll)


def _antithetic_perturbation(theta: PyTree, keys, sigma: float) -> tuple[PyTree, PyTree]:
    """$\\varepsilon$ per particle, and $\\theta \\pm \\varepsilon$ with axes `[particles, 2]`."""
    eps = jax.vmap(lambda k: sample_perturbation(theta, key=k, sigma=sigma))(keys)
    theta_pm = jax.tree.map(lambda t, e: jnp.stack([t[None] + e, t[None] - e], axis=1), theta, eps)
    return eps, theta_pm


def _pes_estimates(
    deltas: LossDeltas,
    records: StepRecord,
    eps: PyTree,
    xi: PyTree,
    restart_xi: PyTree,
    config: MetaConfig,
) -> tuple[PyTree, PyTree]:
    """Each particle's PES gradient estimate and new accumulator ([`elo.pes_combine`][])."""
    combine = jax.vmap(
        lambda d, s, e, x, xr: pes_combine(
            d, s, e, x, xr, sigma=config.sigma, reduction=config.loss_reduction
        )
    )
    grads, new_xi = combine(deltas.accumulated, records.new_segment, eps, xi, restart_xi)
    if deltas.current is not None:
        # Credited to this truncation's epsilon alone (zero accumulators). pes_combine is
        # linear in the deltas, so the two parts add up to one estimate.
        zeros = jax.tree.map(jnp.zeros_like, xi)
        current, _ = combine(deltas.current, records.new_segment, eps, zeros, zeros)
        grads = jax.tree.map(jnp.add, grads, current)
    return grads, new_xi


def _imitation_missing_unless(expert_used: BoolScalar, stats: Metrics) -> Metrics:
    """`stats` with the imitation losses missing (NaN: null in metrics.jsonl), not 0, at outer
    steps that did not measure them."""
    return eqx.tree_at(
        lambda s: (s.direction_loss, s.magnitude_loss),
        stats,
        tuple(
            jnp.where(expert_used, x, jnp.nan) for x in (stats.direction_loss, stats.magnitude_loss)
        ),
    )


def _group_step(
    problem: InnerProblem,
    theta: PyTree,
    particles: Particle,
    weights: SupervisionWeights,
    config: MetaConfig,
    key: PRNGKeyArray,
) -> tuple[PyTree, Particle, Metrics]:
    """PES over one task group's local particles (inside `shard_map`)."""
    supervision = problem.supervision
    keys = _particle_keys(key, particles)
    eps, theta_pm = _antithetic_perturbation(theta, keys.perturbation, config.sigma)
    alpha = supervision.trajectory_weight(weights, particles.unrolls_done)

    def unroll(use_expert: bool):
        return problem.unroll(theta_pm, particles, alpha, keys=keys.unroll, use_expert=use_expert)

    # The expert's step (for Muon, Newton-Schulz on every matrix of every side) is computed
    # only at outer steps whose supervision uses it: after the handover it would be multiplied
    # by zero. A branch on the replicated outer step, not a select per particle.
    expert_used = supervision.needs_expert(weights) if problem.expert is not None else False
    if isinstance(expert_used, bool):
        after, records, restart_xi, snapshot = unroll(expert_used)
    else:
        after, records, restart_xi, snapshot = jax.lax.cond(
            expert_used, lambda: unroll(True), lambda: unroll(False)
        )
    deltas = supervision.loss_deltas(records, weights, alpha, axis_name=PARTICLE_AXIS)
    grads, new_xi = _pes_estimates(deltas, records, eps, particles.xi, restart_xi, config)
    particles = jax.vmap(problem.finish_truncation)(particles, after, records, snapshot, new_xi)
    stats = group_metrics(
        records, particles, alpha, num_particles=config.num_particles, axis_name=PARTICLE_AXIS
    )
    if not isinstance(expert_used, bool):
        stats = _imitation_missing_unless(expert_used, stats)
    grad = jax.tree.map(
        lambda g: jax.lax.psum(jnp.sum(g, axis=0), PARTICLE_AXIS) / config.num_particles, grads
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

    - `state`: the current [`elo.MetaState`][] (from [`elo.init`][] or a previous step).
    - `key`: a JAX PRNG key for this step (e.g. `jax.random.fold_in(key, t)`).

    **Returns:**

    The next [`elo.MetaState`][]; `state.metrics` describes the step just taken.

    **Raises:**

    `TypeError` if `state` is not an `elo.MetaState` (e.g. a config was passed: call
    `elo.init(config, key=...)` first), or if `key` is not a JAX PRNG key.
    """
    if not isinstance(state, MetaState):
        hint = (
            " (a MetaConfig was passed: build the state with elo.init(config, key=...) first)"
            if isinstance(state, MetaConfig)
            else ""
        )
        raise TypeError(
            f"elo.meta_step expects an elo.MetaState, got {type(state).__name__}{hint}."
        )
    check_key(key, "elo.meta_step")
    lo, meta_opt_state, groups, step, metrics = _compiled_for(state.config)(state, key)
    # The task data stay out of the compiled program's outputs (they never change, and
    # returning them would copy them every step): the new state reuses `state.problems`.
    return MetaState(
        config=state.config,
        learned_optimizer=lo,
        meta_opt_state=meta_opt_state,
        groups=groups,
        problems=state.problems,
        step=step,
        metrics=metrics,
    )


def meta_gradient(
    state: MetaState, theta: PyTree, weights: SupervisionWeights, key: PRNGKeyArray
) -> tuple[PyTree, tuple[Particle, ...], Metrics]:
    """The PES meta-gradient of one outer step before clipping, averaged over particles and
    task groups, with the particles after the truncation and the step's statistics (an
    [`elo.Metrics`][] whose `grad_norm` and `nonfinite_grads` the meta-update sets).

    The particle axis is sharded over the mesh with `jax.shard_map`; task groups (which may
    differ in parameter shapes) are a static loop inside it.
    """
    config = state.config
    problems_dyn, problems_static = eqx.partition(state.problems, eqx.is_array)

    def per_shard(theta, groups, problems_dyn, weights, key):
        problems = eqx.combine(problems_dyn, problems_static)
        outputs = [
            _group_step(problem, theta, particles, weights, config, jr.fold_in(key, i))
            for i, (problem, particles) in enumerate(zip(problems, groups))
        ]
        grads, new_groups, stats = zip(*outputs)
        grad = jax.tree.map(lambda *gs: sum(gs) / len(gs), *grads)
        return grad, tuple(new_groups), merge_groups(list(stats))

    sharded = jax.shard_map(
        per_shard,
        mesh=particle_mesh(config),
        in_specs=(P(), P(PARTICLE_AXIS), P(), P(), P()),
        out_specs=(P(), P(PARTICLE_AXIS), P()),
        # The resets' `lax.cond` in the unroll returns constants on one branch and per-device
        # values on the other, which the varying-manual-axes checker rejects unless every such
        # output is `pcast`; the outputs here are made device-invariant by explicit psum/pmax.
        check_vma=False,
    )
    return sharded(theta, state.groups, problems_dyn, weights, key)


def _meta_update(
    config: MetaConfig, grad: PyTree, meta_opt_state: PyTree, theta: PyTree
) -> tuple[PyTree, PyTree, Float[Array, ""], Int[Array, ""]]:
    """Zero (and count) non-finite entries, then clip and apply the meta-optimizer."""
    # A non-finite estimate (e.g. an overflowing loss difference) must not poison the weights:
    # it is counted, then zeroed, as the reference does.
    nonfinite = jnp.asarray(
        sum(jnp.sum(~jnp.isfinite(g)) for g in jax.tree.leaves(grad)), jnp.int32
    )
    grad = jax.tree.map(lambda g: jnp.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0), grad)
    grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grad)))
    updates, meta_opt_state = build_meta_optimizer(config).update(grad, meta_opt_state, theta)
    return optax.apply_updates(theta, updates), meta_opt_state, grad_norm, nonfinite


# Counts traces (at trace time only, free at run time) so tests can assert that later outer
# steps reuse the compiled program: `eqx.debug.get_num_traces(_compiled_meta_step)` (shared by
# both compiled variants below).
@eqx.debug.assert_max_traces(max_traces=None)
def _meta_step_program(state: MetaState, key: PRNGKeyArray):
    config = state.config
    mesh = particle_mesh(config)
    theta, lo_static = eqx.partition(state.learned_optimizer, eqx.is_inexact_array)
    weights = build_supervision(config).weights(state.step)
    grad, groups, stats = meta_gradient(state, theta, weights, key)
    theta, meta_opt_state, grad_norm, nonfinite = _meta_update(
        config, grad, state.meta_opt_state, theta
    )
    metrics = eqx.tree_at(lambda m: (m.grad_norm, m.nonfinite_grads), stats, (grad_norm, nonfinite))
    theta, meta_opt_state, step, metrics = constrain(
        (theta, meta_opt_state, state.step + 1, metrics), mesh, sharded=False
    )
    groups = constrain(groups, mesh, sharded=True)
    return eqx.combine(theta, lo_static), meta_opt_state, groups, step, metrics


_compiled_meta_step = eqx.filter_jit(_meta_step_program)


@functools.cache
def _compiled_meta_step_one_cpu():
    """`_compiled_meta_step` with the compiler options of a single CPU device (built on first
    use: probing the options needs JAX's backend, which importing `elo` must not start)."""
    options = single_cpu_device_compiler_options()
    # `filter_jit` forwards extra keywords to `jax.jit`; its typed overloads do not list them.
    return eqx.filter_jit(_meta_step_program, compiler_options=options)  # pyright: ignore[reportCallIssue]


def _compiled_for(config: MetaConfig):
    devices = particle_devices(config)
    if len(devices) == 1 and devices[0].platform == "cpu":
        return _compiled_meta_step_one_cpu()
    return _compiled_meta_step
