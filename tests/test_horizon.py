"""Horizon samplers: ranges, the log-uniform distribution, the curriculum formula, done tests."""

import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from elo._inner._horizon import CurriculumHorizon, LogUniformHorizon, UniformHorizon


NUM_SAMPLES = 20_000


@jax.jit
def draw_many(horizon, key):
    """NUM_SAMPLES horizons (the module is a traced argument: its numbers are leaves)."""
    keys = jax.random.split(key, NUM_SAMPLES)
    return jax.vmap(lambda k: horizon.sample(0, key=k))(keys)


@jax.jit
def draw_one(horizon, key):
    return horizon.sample(jnp.int32(3), key=key)


@jax.jit
def draw_curriculum(horizon, unrolls):
    keys = jax.random.split(jax.random.key(0), unrolls.shape[0])
    return jax.vmap(lambda j, k: horizon.sample(j, key=k))(unrolls, keys)


min_max = st.integers(1, 5000).flatmap(
    lambda lo: st.tuples(st.just(lo), st.integers(lo + 1, 10**5))
)


@pytest.mark.slow
@settings(deadline=None, max_examples=20)
@given(min_max, st.sampled_from([LogUniformHorizon, UniformHorizon]), st.integers(0, 2**31 - 1))
def test_random_horizons_lie_in_range(bounds, cls, seed):
    lo, hi = bounds
    horizon = cls(min_steps=lo, max_steps=hi)
    n = np.asarray(draw_many(horizon, jax.random.key(seed)))
    assert n.dtype == np.int32
    assert n.min() >= lo and n.max() < hi
    # One draw at a time too.
    one = draw_one(horizon, jax.random.key(seed))
    assert one.shape == () and one.dtype == jnp.int32
    assert lo <= int(one) < hi


@settings(deadline=None, max_examples=10)
@given(min_max, st.integers(0, 2**31 - 1))
def test_log_uniform_distribution(bounds, seed):
    lo, hi = bounds
    n = np.asarray(draw_many(LogUniformHorizon(min_steps=lo, max_steps=hi), jax.random.key(seed)))
    # N = floor(X), X = exp(U[ln lo, ln hi)), so P(N <= q) = P(X < q + 1) = ln((q+1)/lo)/ln(hi/lo).
    # Each empirical frequency is binomial: allow 5 standard deviations.
    five_sigma = 5 * math.sqrt(0.25 / NUM_SAMPLES)
    for q in {lo, int(math.sqrt(lo * hi)), (lo + hi) // 2, hi - 1}:
        exact = min(1.0, math.log((q + 1) / lo) / math.log(hi / lo))
        assert abs(np.mean(n <= q) - exact) <= five_sigma, q
    # The median is sqrt(lo hi) up to the same statistical band, mapped through the quantile
    # function Q(p) = floor(lo (hi/lo)^p).
    median = np.median(n)

    def quantile(p):
        return math.floor(lo * (hi / lo) ** p)

    assert quantile(0.5 - five_sigma) <= median <= quantile(0.5 + five_sigma) + 1
    assert quantile(0.5 - five_sigma) <= math.sqrt(lo * hi) <= quantile(0.5 + five_sigma) + 1


@settings(deadline=None, max_examples=10)
@given(st.integers(1, 1000).flatmap(lambda lo: st.tuples(st.just(lo), st.integers(lo + 1, lo + 8))))
def test_uniform_is_uniform_over_integers(bounds):
    lo, hi = bounds
    n = np.asarray(draw_many(UniformHorizon(min_steps=lo, max_steps=hi), jax.random.key(lo)))
    counts = np.bincount(n - lo, minlength=hi - lo)
    assert len(counts) == hi - lo  # nothing at hi or above
    p = 1 / (hi - lo)
    # Each count is binomial(NUM_SAMPLES, p): allow 5 standard deviations.
    assert np.all(np.abs(counts - NUM_SAMPLES * p) <= 5 * math.sqrt(NUM_SAMPLES * p * (1 - p)))


@settings(deadline=None, max_examples=25)
@given(
    st.integers(1, 10_000).flatmap(lambda lo: st.tuples(st.just(lo), st.integers(lo, 10**6))),
    st.integers(0, 10**6),
    st.integers(1, 100),
    st.lists(st.integers(0, 2**31 - 1), min_size=8, max_size=8),
)
def test_curriculum_formula_is_exact(bounds, increment, per_stage, unrolls):
    lo, hi = bounds
    horizon = CurriculumHorizon(
        min_steps=lo, max_steps=hi, increment=increment, unrolls_per_stage=per_stage
    )
    n = draw_curriculum(horizon, jnp.asarray(unrolls, jnp.int32))
    # Python integers: no overflow, even for j and the increment near int32's range.
    expected = [min(hi, lo + increment * (j // per_stage)) for j in unrolls]
    np.testing.assert_array_equal(n, expected)
    assert n.dtype == jnp.int32


def test_curriculum_reference_values():
    horizon = CurriculumHorizon()
    n = [
        int(horizon.sample(j, key=jax.random.key(0))) for j in (0, 19, 20, 39, 40, 480, 500, 10**6)
    ]
    assert n == [100, 100, 300, 300, 500, 4900, 5000, 5000]
    # A constant horizon is a curriculum that never grows.
    constant = CurriculumHorizon(min_steps=7, max_steps=7)
    assert {int(constant.sample(j, key=jax.random.key(j))) for j in range(0, 200, 13)} == {7}


@pytest.mark.parametrize(
    "horizon",
    [LogUniformHorizon(), UniformHorizon(), CurriculumHorizon()],
)
def test_done_at_horizon(horizon):
    steps = jnp.arange(8, dtype=jnp.int32)
    done = horizon.is_done(steps, jnp.full((8,), 5, jnp.int32))
    np.testing.assert_array_equal(done, np.arange(8) >= 5)
    assert done.dtype == jnp.bool_
    assert bool(jax.jit(horizon.is_done)(5, 5)) and not bool(jax.jit(horizon.is_done)(4, 5))


def test_curriculum_reference_off_by_one():
    horizon = CurriculumHorizon(reference_off_by_one=True)
    steps = jnp.arange(8, dtype=jnp.int32)
    done = jax.vmap(horizon.is_done, in_axes=(0, None))(steps, jnp.int32(5))
    np.testing.assert_array_equal(done, np.arange(8) >= 4)


@pytest.mark.slow
def test_jit_vmap_over_particles():
    horizon = LogUniformHorizon()
    keys = jax.random.split(jax.random.key(1), 6)
    eager = np.asarray([horizon.sample(0, key=k) for k in keys])
    batched = jax.jit(jax.vmap(lambda k: horizon.sample(0, key=k)))(keys)
    np.testing.assert_array_equal(eager, batched)
    # Numbers given as arrays are leaves: a sweep over them does not recompile.
    traced = jax.jit(lambda h, k: h.sample(0, key=k))
    a = traced(UniformHorizon(min_steps=jnp.int32(10), max_steps=jnp.int32(11)), keys[0])
    b = traced(UniformHorizon(min_steps=jnp.int32(20), max_steps=jnp.int32(21)), keys[0])
    assert (int(a), int(b)) == (10, 20)


@pytest.mark.parametrize("cls", [LogUniformHorizon, UniformHorizon])
def test_random_horizon_validation(cls):
    with pytest.raises(ValueError, match=r"min_steps.*>= 1.*min_steps=0"):
        cls(min_steps=0, max_steps=10)
    with pytest.raises(ValueError, match=r"max_steps.*> min_steps=10.*max_steps=10"):
        cls(min_steps=10, max_steps=10)
    with pytest.raises(ValueError, match=r"max_steps.*max_steps=5"):
        cls(min_steps=10, max_steps=5)
    with pytest.raises(ValueError, match=r"min_steps"):
        cls(min_steps=np.int32(-3), max_steps=10)


def test_curriculum_validation():
    with pytest.raises(ValueError, match=r"min_steps.*min_steps=0"):
        CurriculumHorizon(min_steps=0)
    with pytest.raises(ValueError, match=r"max_steps.*>= min_steps=100.*max_steps=99"):
        CurriculumHorizon(max_steps=99)
    with pytest.raises(ValueError, match=r"increment.*>= 0.*increment=-1"):
        CurriculumHorizon(increment=-1)
    with pytest.raises(ValueError, match=r"unrolls_per_stage.*>= 1.*unrolls_per_stage=0"):
        CurriculumHorizon(unrolls_per_stage=0)
    CurriculumHorizon(min_steps=5, max_steps=5, increment=0)  # a constant horizon is allowed
