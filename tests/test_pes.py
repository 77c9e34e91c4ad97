"""PES is unbiased on exactly-quadratic unrolled systems (TESTING.md).

The inner system is linear, `s_{n+1} = A s_n + B theta`, with loss `L_n = 1/2 |C s_n - y|^2`, so
every per-step loss is quadratic in the per-truncation copies of theta and Gaussian smoothing only
adds a constant: the expected PES estimate equals the gradient of the deterministic unroll.
Statistical tolerance: the mean of K independent estimates must lie within z * std / sqrt(K) of
the truth, per coordinate, with z = 5 (a false alarm has probability ~6e-7 per coordinate).
"""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings

import elo


STATE_DIM = 4
THETA_DIM = 3
SIGMA = 0.05
NUM_SAMPLES = 4000
Z = 5.0


class LinearSystem(eqx.Module):
    a: jax.Array
    b: jax.Array
    c: jax.Array
    y: jax.Array
    s0: jax.Array


def make_system(seed: int, memory: float) -> LinearSystem:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(STATE_DIM, STATE_DIM)))
    a = memory * q  # spectral radius `memory` < 1 keeps the unroll stable
    b = rng.normal(size=(STATE_DIM, THETA_DIM)) / np.sqrt(THETA_DIM)
    c = rng.normal(size=(2, STATE_DIM)) / np.sqrt(STATE_DIM)
    y = rng.normal(size=(2,))
    s0 = rng.normal(size=(STATE_DIM,))
    return LinearSystem(*(jnp.asarray(v, jnp.float32) for v in (a, b, c, y, s0)))


class Inner(eqx.Module):
    """One side's inner state: system state, step counter, and the resume snapshot."""

    s: jax.Array
    count: jax.Array
    snap_s: jax.Array
    snap_count: jax.Array


def constant(count, horizon):
    del count, horizon
    return 1.0


def cosine_to_zero(count, horizon):
    """A learned optimizer's decayed step: a cosine from 1 to 0 over the run's horizon."""
    progress = jnp.clip(count / horizon, 0.0, 1.0)
    return 0.5 * (1.0 + jnp.cos(jnp.pi * progress))


def make_unroll(system, *, horizon, length, resume_at, store_xi, snap_xi, schedule=constant):
    """An unroll of `length` steps. A trajectory restarts when `count >= horizon`; a restart at a
    global truncation index in `resume_at` resumes from the snapshot instead of `s0`."""

    def unroll(theta, inner, key_and_index):
        del key_and_index

        def step(carry, _):
            s, count, snap_s, snap_count, started, resumed = carry
            restart = count >= horizon
            s = jnp.where(restart, jnp.where(resume_at, snap_s, system.s0), s)
            count = jnp.where(restart, jnp.where(resume_at, snap_count, 0), count)
            resumed = resumed | (restart & resume_at)
            started = started | restart
            s = system.a @ s + schedule(count, horizon) * (system.b @ theta)
            count = count + 1
            loss = 0.5 * jnp.sum((system.c @ s - system.y) ** 2)
            return (s, count, snap_s, snap_count, started, resumed), (loss, started)

        init = (inner.s, inner.count, inner.snap_s, inner.snap_count, False, False)
        (s, count, _, _, _, resumed), (losses, started) = jax.lax.scan(
            step, init, None, length=length
        )
        restart_xi = jnp.where(resumed & store_xi, snap_xi, jnp.zeros_like(snap_xi))
        out = elo.internal.Unrolled(
            losses=losses,
            mask=jnp.ones_like(started),
            new_segment=started,
            restart_xi=restart_xi,
        )
        return out, Inner(s, count, inner.snap_s, inner.snap_count)

    return unroll


def true_window_gradients(
    system, theta, *, horizon, length, num_truncations, resume_plan, schedule=constant
):
    """Gradient of each truncation's mean loss for the deterministic unroll at theta."""

    def window_losses(theta):
        s, count = system.s0, 0
        snap_s, snap_count = system.s0, 0
        means = []
        for t in range(num_truncations):
            if t == resume_plan["snapshot_after"]:
                snap_s, snap_count = s, count
            total = 0.0
            for _ in range(length):
                if count >= horizon:
                    if t == resume_plan["resume_in"]:
                        s, count = snap_s, snap_count
                    else:
                        s, count = system.s0, 0
                s = system.a @ s + schedule(count, horizon) * (system.b @ theta)
                count += 1
                total = total + 0.5 * jnp.sum((system.c @ s - system.y) ** 2)
            means.append(total / length)
        return jnp.stack(means)

    return jax.jacrev(window_losses)(theta)


def run_pes(
    system,
    theta,
    *,
    horizon,
    length,
    num_truncations,
    resume_plan,
    store_xi,
    key,
    schedule=constant,
):
    """K independent particles, each carried through `num_truncations` truncations."""

    def one_particle(key):
        s0 = system.s0
        pos = neg = Inner(s0, jnp.asarray(0), s0, jnp.asarray(0))
        xi = jnp.zeros_like(theta)
        snap_xi = jnp.zeros_like(theta)
        grads = []
        for t in range(num_truncations):
            if t == resume_plan["snapshot_after"]:
                pos = Inner(pos.s, pos.count, pos.s, pos.count)
                neg = Inner(neg.s, neg.count, neg.s, neg.count)
                snap_xi = xi
            unroll = make_unroll(
                system,
                horizon=horizon,
                length=length,
                resume_at=jnp.asarray(t == resume_plan["resume_in"]),
                store_xi=store_xi,
                snap_xi=snap_xi,
                schedule=schedule,
            )
            g, (pos, neg, xi), _ = elo.internal.pes_grad(
                unroll, theta, pos, neg, xi, key=jr.fold_in(key, t), sigma=SIGMA
            )
            grads.append(g)
        return jnp.stack(grads)

    keys = jr.split(key, NUM_SAMPLES)
    return jax.jit(jax.vmap(one_particle))(keys)


def assert_unbiased(samples, truth):
    mean = np.asarray(samples.mean(axis=0))
    stderr = np.asarray(samples.std(axis=0)) / np.sqrt(samples.shape[0])
    err = np.abs(mean - np.asarray(truth))
    assert np.all(err <= Z * stderr + 1e-6), (err / (stderr + 1e-12)).max()


NO_RESUME = {"snapshot_after": -1, "resume_in": -1}


@pytest.mark.slow
@settings(deadline=None, max_examples=4)
@given(seed=st.integers(0, 2**16), theta_seed=st.integers(0, 2**16))
def test_unbiased_over_consecutive_truncations(seed, theta_seed):
    system = make_system(seed, memory=0.8)
    theta = jnp.asarray(np.random.default_rng(theta_seed).normal(size=THETA_DIM), jnp.float32)
    kwargs = dict(horizon=100, length=5, num_truncations=3, resume_plan=NO_RESUME)
    samples = run_pes(system, theta, store_xi=True, key=jr.key(seed), **kwargs)
    truth = true_window_gradients(system, theta, **kwargs)
    assert_unbiased(samples, truth)


@pytest.mark.slow
@settings(deadline=None, max_examples=4)
@given(seed=st.integers(0, 2**16), horizon=st.integers(6, 9))
def test_unbiased_with_resets_inside_truncations(seed, horizon):
    system = make_system(seed, memory=0.8)
    theta = jnp.asarray(np.random.default_rng(seed + 1).normal(size=THETA_DIM), jnp.float32)
    kwargs = dict(horizon=horizon, length=5, num_truncations=4, resume_plan=NO_RESUME)
    samples = run_pes(system, theta, store_xi=True, key=jr.key(seed), **kwargs)
    truth = true_window_gradients(system, theta, **kwargs)
    assert_unbiased(samples, truth)


RESUME = {"snapshot_after": 1, "resume_in": 3}


@pytest.mark.slow
@settings(deadline=None, max_examples=4)
@given(seed=st.integers(0, 2**16))
def test_unbiased_when_resumed_with_stored_xi(seed):
    system = make_system(seed, memory=0.9)
    theta = jnp.asarray(np.random.default_rng(seed + 2).normal(size=THETA_DIM), jnp.float32)
    kwargs = dict(horizon=17, length=5, num_truncations=5, resume_plan=RESUME)
    samples = run_pes(system, theta, store_xi=True, key=jr.key(seed), **kwargs)
    truth = true_window_gradients(system, theta, **kwargs)
    assert_unbiased(samples, truth)


@pytest.mark.slow
@settings(deadline=None, max_examples=4)
@given(seed=st.integers(0, 2**16))
def test_unbiased_with_a_decayed_schedule_and_a_resume(seed):
    """The inner step decays to 0 with a cosine over each run's horizon (a learned optimizer
    deployed with a decayed schedule); the losses stay quadratic in theta, so PES stays
    unbiased, across resets and a resume with the stored xi."""
    system = make_system(seed, memory=0.9)
    theta = jnp.asarray(np.random.default_rng(seed + 3).normal(size=THETA_DIM), jnp.float32)
    kwargs = dict(
        horizon=17, length=5, num_truncations=5, resume_plan=RESUME, schedule=cosine_to_zero
    )
    samples = run_pes(system, theta, store_xi=True, key=jr.key(seed), **kwargs)
    truth = true_window_gradients(system, theta, **kwargs)
    assert_unbiased(samples, truth)


@pytest.mark.slow
def test_resume_without_stored_xi_is_biased():
    """The reference's reset of xi to eps on resume drops the gradient through the resumed
    state; with a long-memory system the resumed truncation's estimate is far off."""
    system = make_system(3, memory=0.95)
    theta = jnp.asarray([1.0, -0.5, 0.25], jnp.float32)
    kwargs = dict(horizon=17, length=5, num_truncations=5, resume_plan=RESUME)
    truth = true_window_gradients(system, theta, **kwargs)
    biased = run_pes(system, theta, store_xi=False, key=jr.key(0), **kwargs)
    unbiased = run_pes(system, theta, store_xi=True, key=jr.key(0), **kwargs)
    resumed = RESUME["resume_in"]
    assert_unbiased(unbiased[:, resumed], truth[resumed])
    mean = np.asarray(biased[:, resumed].mean(axis=0))
    stderr = np.asarray(biased[:, resumed].std(axis=0)) / np.sqrt(NUM_SAMPLES)
    assert np.any(np.abs(mean - np.asarray(truth[resumed])) > Z * stderr)


def test_antithetic_pairs_cancel_even_order_terms():
    """For L(theta) = c + b.theta + theta^T Q theta / 2, each antithetic estimate is exactly the
    linear term's: (L(theta+e) - L(theta-e)) e / (2 sigma^2) = ((Q theta + b).e) e / sigma^2."""
    rng = np.random.default_rng(0)
    q = rng.normal(size=(THETA_DIM, THETA_DIM))
    q = jnp.asarray(q @ q.T, jnp.float32)
    b = jnp.asarray(rng.normal(size=THETA_DIM), jnp.float32)
    theta = jnp.asarray(rng.normal(size=THETA_DIM), jnp.float32)

    def unroll(th, state, key):
        loss = 7.0 + b @ th + 0.5 * th @ q @ th
        out = elo.internal.Unrolled(
            losses=loss[None],
            mask=jnp.ones((1,), bool),
            new_segment=jnp.zeros((1,), bool),
            restart_xi=jnp.zeros_like(th),
        )
        return out, state

    def estimate(key):
        g, _, _ = elo.internal.pes_grad(
            unroll, theta, 0.0, 0.0, jnp.zeros_like(theta), key=key, sigma=SIGMA
        )
        eps_key, _ = jr.split(key)
        eps = elo.sample_perturbation(theta, key=eps_key, sigma=SIGMA)
        return g, ((q @ theta + b) @ eps) * eps / SIGMA**2

    got, want = jax.vmap(estimate)(jr.split(jr.key(1), 64))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4)


def test_combine_moves_accumulator():
    eps = jnp.ones(2)
    xi = jnp.full(2, 3.0)
    restart_xi = jnp.full(2, 10.0)
    no_reset = jnp.zeros(4, bool)
    _, new_xi = elo.pes_combine(jnp.ones(4), no_reset, eps, xi, restart_xi, sigma=1.0)
    np.testing.assert_array_equal(new_xi, xi + eps)
    reset = jnp.asarray([False, False, True, True])
    g, new_xi = elo.pes_combine(jnp.ones(4), reset, eps, xi, restart_xi, sigma=1.0)
    np.testing.assert_array_equal(new_xi, restart_xi + eps)
    # Two steps credited to xi + eps (=4) and two to xi_r + eps (=11), averaged over 4 steps.
    np.testing.assert_allclose(g, (2 * 4.0 + 2 * 11.0) / 4 / 2, rtol=1e-6)
    # No mask is an all-true mask, bit for bit; a mask drops steps from the sum and the mean.
    all_valid, _ = elo.pes_combine(
        jnp.ones(4), reset, eps, xi, restart_xi, sigma=1.0, mask=jnp.ones(4, bool)
    )
    np.testing.assert_array_equal(all_valid, g)
    first_three = jnp.asarray([True, True, True, False])
    masked, _ = elo.pes_combine(
        jnp.ones(4), reset, eps, xi, restart_xi, sigma=1.0, mask=first_three
    )
    np.testing.assert_allclose(masked, (2 * 4.0 + 1 * 11.0) / 3 / 2, rtol=1e-6)
