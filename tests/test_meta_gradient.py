"""The PES meta-gradient of the compiled meta-step is unbiased (exact-answer tests).

`tests/test_pes.py` proves the estimator unbiased on linear systems through `pes_grad`. Here the
same claim is checked on the path `elo.meta_step` takes (keys shared by the two antithetic
sides, the learned optimizer's unroll of real inner problems, the supervision's loss deltas, the
vmapped `pes_combine`, the reduction over sharded particles): the mean of many pre-clip
meta-gradients from `elo.internal.meta_gradient` must match `jax.grad` of the deterministic
truncated unroll, on noise-free quadratics with no expert and no buffer.

On the first truncation every particle's accumulator is zero, so PES is antithetic ES and its
expectation is the gradient of the Gaussian-smoothed truncation loss. With $\\sigma = 0.01$ the
smoothing bias is $O(\\sigma^2)$, far below the statistical tolerance used here.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo.tasks import QuadraticTask


NUM_PARTICLES = 64
NUM_SAMPLES = 192
Z = 5.0  # a false alarm has probability ~6e-7 per coordinate / per projection


def setup(horizon: int, truncation: int, max_horizon: int | None = None):
    config = elo.presets.pes_small_fc(
        tasks=("quadratic",),
        num_particles=NUM_PARTICLES,
        truncation_length=truncation,
        horizon="uniform",
        min_horizon=horizon,
        # By default every horizon is exactly `horizon`.
        max_horizon=horizon + 1 if max_horizon is None else max_horizon,
        initial_step_offset=1,  # every particle starts at inner step 0
        task_augmentation=False,
        num_outer_steps=10,
    )
    task = QuadraticTask(4, seed=3, condition_number=3.0, noise_scale=0.0)
    state = elo.init(config, key=jr.key(0), tasks=[task])
    theta, lo_static = eqx.partition(state.learned_optimizer, eqx.is_inexact_array)
    weights = elo.internal.build_supervision(config).weights(state.step)
    return config, state, theta, lo_static, weights


def unroll_keys(key, num_particles):
    """The unroll keys `_group_step` derives for group 0 (global particle index, then split)."""
    group_key = jr.fold_in(key, 0)
    keys = jax.vmap(lambda i: jr.fold_in(group_key, i))(jnp.arange(num_particles))
    return jax.vmap(jr.split)(keys)[:, 1]


def samples(horizon: int, truncation: int, max_horizon: int | None = None):
    """Pre-clip meta-gradients and the true gradient of each sample's deterministic unroll."""
    config, state, theta, _, weights = setup(horizon, truncation, max_horizon)
    problem = state.problems[0]
    particles = state.groups[0]
    estimate = eqx.filter_jit(elo.internal.meta_gradient)

    @jax.jit
    def true_gradient(theta, key):
        def loss(theta):
            theta_pm = jax.tree.map(
                lambda t: jnp.broadcast_to(t, (NUM_PARTICLES, 2, *t.shape)), theta
            )
            alpha = jnp.ones((NUM_PARTICLES,), jnp.float32)
            _, records, _, _ = problem.unroll(
                theta_pm, particles, alpha, keys=unroll_keys(key, NUM_PARTICLES)
            )
            return jnp.mean(records.meta_loss)

        return jax.grad(loss)(theta)

    flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])  # noqa: E731
    estimates, truths = [], []
    for m in range(NUM_SAMPLES):
        key = jr.key(1000 + m)
        grad, _, _ = estimate(state, theta, weights, key)
        estimates.append(flat(jax.device_get(grad)))
        truths.append(flat(jax.device_get(true_gradient(theta, key))))
    return np.asarray(estimates, np.float64), np.asarray(truths, np.float64)


def assert_unbiased(estimates, truths):
    errors = estimates - truths
    mean = errors.mean(axis=0)
    std = errors.std(axis=0, ddof=1)
    bound = Z * std / np.sqrt(len(errors)) + 1e-7
    assert np.all(np.abs(mean) <= bound), np.max(np.abs(mean) / bound)
    # Per coordinate the test has little power (one coordinate carries 1/|theta| of the
    # signal), so also project on the true gradient: E<g_hat, g>/|g|^2 = 1.
    truth = truths.mean(axis=0)
    projections = estimates @ truth / (truth @ truth)
    half = Z * projections.std(ddof=1) / np.sqrt(len(projections))
    assert abs(projections.mean() - 1.0) <= half, (projections.mean(), half)
    return projections


@pytest.mark.slow
def test_meta_gradient_is_unbiased_on_a_truncation_without_resets():
    estimates, truths = samples(horizon=50, truncation=5)
    # Every sample's deterministic unroll is the same (no noise, no reset in the truncation).
    np.testing.assert_allclose(truths, truths[:1].repeat(len(truths), 0), rtol=1e-5, atol=1e-9)
    projections = assert_unbiased(estimates, truths)
    # The test can fail: an estimate off by a factor of 2 (e.g. sigma^2 for 2 sigma^2) is
    # rejected by the projection test.
    half = Z * (2 * projections).std(ddof=1) / np.sqrt(len(projections))
    assert abs(2 * projections.mean() - 1.0) > half


@pytest.mark.slow
def test_meta_gradient_is_unbiased_with_a_fresh_restart_inside_the_truncation():
    """Horizons 4-7, truncation 8: each inner problem ends after step 4 to 7 and restarts fresh
    (a new initialisation drawn from the step's key) for the remaining steps up to 8, which are
    credited to xi_r + eps with xi_r = 0. (The learned optimizer's first step after a restart is
    zero, its warmup starts at 0, so a restart needs a few steps to depend on the weights.)"""
    estimates, truths = samples(horizon=4, truncation=8, max_horizon=8)
    # Fresh restarts draw new initial parameters per key, so the truths differ per sample.
    assert np.std(truths, axis=0).max() > 0
    assert_unbiased(estimates, truths)
