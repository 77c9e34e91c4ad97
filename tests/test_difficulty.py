"""The difficulty score: CUSUM recursion, draw-up identity, non-finite losses, jit/vmap."""

import functools as ft

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from elo._inner._difficulty import (
    difficulty_init,
    difficulty_reset,
    difficulty_scores,
    difficulty_step,
    difficulty_update,
    DifficultyState,
    FAILURE_LOSS,
    sanitize_loss,
)


EPS32 = float(np.finfo(np.float32).eps)
# A few fixed lengths, so that the jitted functions compile once per length, not per example.
LENGTHS = (1, 2, 5, 16, 64)
scores_jit = jax.jit(difficulty_scores)


@st.composite
def loss_sequences(draw):
    """float32 loss sequences built from drawn ints: random, constant, monotone or spiky."""
    n = draw(st.sampled_from(LENGTHS))
    kind = draw(st.sampled_from(["random", "constant", "increasing", "decreasing", "spiky"]))
    scale = 10.0 ** draw(st.integers(-3, 3))
    offset = draw(st.integers(-1000, 1000))
    ints = np.asarray(draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n)), np.float64)
    if kind == "constant":
        ints = np.full(n, ints[0])
    elif kind == "increasing":
        ints = np.cumsum(ints)
    elif kind == "decreasing":
        ints = -np.cumsum(ints)
    elif kind == "spiky":
        spikes = draw(st.lists(st.integers(0, n - 1), max_size=3))
        ints = -np.cumsum(ints % 10)
        ints[spikes] += 10_000
    return ((ints + offset) * scale).astype(np.float32)


def drawup(losses):
    """Exact reference: l_n - min_{k<=n} l_k, in float64."""
    x = np.asarray(losses, np.float64)
    return x - np.minimum.accumulate(x, axis=0)


@jax.jit
def cusum_scores(losses):
    """The reference recursion, `difficulty_step` scanned from a reset."""

    def step(carry, loss):
        score, prev = carry
        score = difficulty_step(score, prev, loss)
        return (score, loss), score

    init = (jnp.zeros(losses.shape[1:], jnp.float32), jnp.full(losses.shape[1:], FAILURE_LOSS))
    return jax.lax.scan(step, init, losses)[1]


@settings(deadline=None, max_examples=40)
@given(loss_sequences())
def test_scores_are_the_drawup(losses):
    scores, running_max = scores_jit(losses)
    scores, running_max = np.asarray(scores), np.asarray(running_max)
    assert scores.dtype == running_max.dtype == np.float32
    assert np.all(scores >= 0)
    assert scores[0] == 0
    # One float32 rounding of the exact difference l_n - min_k l_k (both are float32 numbers).
    np.testing.assert_allclose(scores, drawup(losses), rtol=EPS32, atol=0)
    # The running maximum is exact (max does not round).
    np.testing.assert_array_equal(running_max, np.maximum.accumulate(scores))


@settings(deadline=None, max_examples=40)
@given(loss_sequences())
def test_cusum_recursion_is_the_drawup(losses):
    scores = np.asarray(cusum_scores(jnp.asarray(losses)))
    assert np.all(scores >= 0)
    assert scores[0] == 0
    # Each step rounds a difference of two losses (<= 2L) and a sum (<= 4L), i.e. adds at most
    # 3 eps L of error, with L = max |l|; over n steps the error is at most 3 eps L n.
    big = float(np.max(np.abs(losses)))
    np.testing.assert_allclose(scores, drawup(losses), rtol=0, atol=3 * EPS32 * big * len(losses))


@settings(deadline=None, max_examples=30)
@given(
    st.sampled_from(LENGTHS).flatmap(
        lambda n: st.lists(st.integers(0, 1000), min_size=n, max_size=n)
    ),
    st.integers(-3, 3),
    st.integers(-1000, 1000),
)
def test_zero_on_nonincreasing_losses(steps, log_scale, offset):
    losses = ((offset - np.cumsum(steps)) * 10.0**log_scale).astype(np.float32)
    assert np.all(np.diff(losses) <= 0)
    scores, running_max = scores_jit(losses)
    # Exactly zero for both forms: rounding is monotone, so l_n - l_{n-1} <= 0 stays <= 0.
    np.testing.assert_array_equal(scores, 0)
    np.testing.assert_array_equal(running_max, 0)
    np.testing.assert_array_equal(cusum_scores(jnp.asarray(losses)), 0)


@settings(deadline=None, max_examples=30)
@given(loss_sequences(), st.data())
def test_nonfinite_losses_are_maximal_failures(losses, data):
    n = len(losses)
    bad = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    values = data.draw(st.lists(st.sampled_from([np.nan, np.inf, -np.inf]), min_size=len(bad)))
    losses = losses.copy()
    for i, v in zip(bad, values):
        losses[i] = v
    sanitized = np.where(np.isfinite(losses), losses, np.float32(FAILURE_LOSS))
    for scores in (scores_jit(losses)[0], cusum_scores(jnp.asarray(losses))):
        scores = np.asarray(scores)
        assert np.all(np.isfinite(scores))
        assert np.all(scores >= 0)
        assert scores[0] == 0
    scores, running_max = map(np.asarray, scores_jit(losses))
    # The draw-up form stays exact through blow-ups.
    np.testing.assert_allclose(scores, drawup(sanitized), rtol=EPS32, atol=0)
    first = min(bad)
    if first > 0:
        # The first failure sets a record at least as large as any finite loss's draw-up could be.
        assert running_max[first] == scores[first] >= FAILURE_LOSS - float(losses[:first].min())
        assert scores[first] > 1e29


def test_sanitize_loss():
    x = jnp.array([1.5, -2.0, jnp.nan, jnp.inf, -jnp.inf, 3e30, -3e30], jnp.float32)
    out = np.asarray(sanitize_loss(x))
    np.testing.assert_array_equal(out, np.float32([1.5, -2.0, 1e30, 1e30, 1e30, 1e30, -1e30]))
    # float16 cannot hold 1e30, so the score is computed in at least float32.
    half = sanitize_loss(jnp.array([jnp.nan, 1.0], jnp.float16))
    assert half.dtype == jnp.float32
    np.testing.assert_array_equal(half, np.float32([1e30, 1.0]))


def test_update_init_and_reset():
    state = difficulty_init()
    assert state.score.shape == () and state.score.dtype == jnp.float32
    assert float(state.min_loss) == np.float32(FAILURE_LOSS)
    for loss in [3.0, 1.0, 2.5]:
        state = difficulty_update(state, loss)
    assert float(state.score) == 1.5 and float(state.max_score) == 1.5
    assert float(state.min_loss) == 1.0
    # difficulty_step agrees on the same history.
    assert float(difficulty_step(0.0, 1.0, 2.5)) == 1.5

    batch = DifficultyState(
        score=jnp.array([1.0, 2.0]), min_loss=jnp.array([0.0, 1.0]), max_score=jnp.array([3.0, 4.0])
    )
    out = difficulty_reset(batch, jnp.array([True, False]))
    np.testing.assert_array_equal(out.score, [0.0, 2.0])
    np.testing.assert_array_equal(out.min_loss, np.float32([FAILURE_LOSS, 1.0]))
    np.testing.assert_array_equal(out.max_score, [0.0, 4.0])
    # After a reset the next score is 0 again, whatever the loss.
    after = difficulty_update(out, jnp.array([1e3, 1e3]))
    np.testing.assert_array_equal(after.score, [0.0, 999.0])


vmapped_scores = jax.jit(jax.vmap(difficulty_scores, in_axes=1, out_axes=1))


@jax.jit
@ft.partial(jax.vmap, in_axes=1, out_axes=1)
def vmapped_run(losses):
    def step(state, loss):
        state = difficulty_update(state, loss)
        return state, state.score

    return jax.lax.scan(step, difficulty_init(), losses)[1]


@settings(deadline=None, max_examples=10)
@given(st.sampled_from([(1, 1), (16, 3)]), st.integers(0, 2**31 - 1))
def test_batched_jit_and_vmap(shape, seed):
    n, batch = shape
    losses = np.random.default_rng(seed).normal(size=(n, batch)).astype(np.float32)
    scores, running_max = scores_jit(losses)
    # Batched leading-axis scan == vmap over the batch axis == one column at a time.
    v_scores, v_max = vmapped_scores(losses)
    np.testing.assert_array_equal(scores, v_scores)
    np.testing.assert_array_equal(running_max, v_max)
    for b in range(batch):
        np.testing.assert_array_equal(scores[:, b], scores_jit(losses[:, b])[0])

    # Per-particle update inside vmap, as the meta-step uses it.
    np.testing.assert_array_equal(vmapped_run(losses), scores)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_output_dtype(dtype):
    scores, running_max = difficulty_scores(jnp.array([1.0, 2.0], dtype))
    assert scores.dtype == running_max.dtype == jnp.float32
