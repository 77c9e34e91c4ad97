"""The resume buffer: bit-exact storage, FIFO ring, resume probability, uniform reads, push rule."""

import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings

import elo
from elo._inner._buffer import (
    buffer_pop,
    buffer_push,
    record_window,
    resume_decision,
    ResumeBuffer,
    should_push,
)
from elo._inner._difficulty import difficulty_scores


def bits(tree):
    """The raw bytes of every leaf (key data for PRNG keys), so NaN payloads and -0.0 count."""

    def raw(x):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        x = np.asarray(x)
        return x.dtype.str, x.shape, x.tobytes()

    return jax.tree.map(raw, tree)


SPECIAL = [np.nan, np.inf, -np.inf, -0.0]
FLOATS = st.one_of(
    st.integers(-(10**6), 10**6).map(lambda i: i / 64),
    st.sampled_from([*SPECIAL, 1e-45, 3.4e38]),
)
HALFS = st.one_of(st.integers(-(10**4), 10**4).map(lambda i: i / 64), st.sampled_from(SPECIAL))


@st.composite
def snapshots(draw):
    """A pytree with leaves of several dtypes and shapes, values built from drawn ints.

    Shapes are fixed so that the jitted push and pop compile once per buffer size.
    """
    floats = np.asarray(draw(st.lists(FLOATS, min_size=3, max_size=3)), np.float32)
    return {
        "params": {"w": floats.reshape(3, 1), "b": floats[:1].astype(jnp.bfloat16)},
        "step": np.int32(draw(st.integers(-(2**31), 2**31 - 1))),
        "scale": np.float16(draw(HALFS)),
        "flags": np.asarray(draw(st.lists(st.booleans(), min_size=3, max_size=3))),
        "bytes": np.asarray(draw(st.lists(st.integers(0, 255), min_size=2, max_size=2)), np.uint8),
        "key": jax.random.key(draw(st.integers(0, 2**32 - 1))),
        "xi": (np.float32(draw(FLOATS)),),
    }


push_jit = jax.jit(buffer_push)
pop_jit = jax.jit(lambda buffer, key: buffer_pop(buffer, key=key))
resume_jit = jax.jit(lambda buffer, prob, key: resume_decision(buffer, prob, key=key))


@settings(deadline=None, max_examples=20)
@given(snapshots(), st.sampled_from([1, 3]), st.integers(0, 2**31 - 1))
def test_push_then_pop_is_bit_exact(snapshot, num_slots, seed):
    buffer = ResumeBuffer.empty(snapshot, num_slots)
    assert int(buffer.num_filled) == 0 and int(buffer.next_slot) == 0
    snapshot = jax.tree.map(jnp.asarray, snapshot)
    buffer = push_jit(buffer, snapshot, True)
    assert int(buffer.num_filled) == 1 and int(buffer.next_slot) == 1 % num_slots
    out, slot = pop_jit(buffer, jax.random.key(seed))
    assert int(slot) == 0  # the only filled slot
    assert jax.tree.structure(out) == jax.tree.structure(snapshot)
    assert bits(out) == bits(snapshot)


@settings(deadline=None, max_examples=25)
@given(
    st.sampled_from([1, 2, 3]),
    st.lists(st.tuples(st.integers(-1000, 1000), st.booleans()), min_size=0, max_size=12),
)
def test_fifo_order_and_wrap_around(num_slots, writes):
    def snap(i):
        return {"x": jnp.int32(i), "y": jnp.full((2,), i / 8, jnp.float32)}

    buffer = ResumeBuffer.empty(snap(0), num_slots)
    model = [None] * num_slots  # a reference ring buffer
    count = 0
    for value, push in writes:
        before = buffer
        buffer = push_jit(buffer, snap(value), push)
        if push:
            model[count % num_slots] = value
            count += 1
        else:
            assert bits(buffer) == bits(before)  # not pushing changes nothing, bit for bit
        assert int(buffer.num_filled) == min(count, num_slots)
        assert int(buffer.next_slot) == count % num_slots
        for slot, value in enumerate(model):
            expected = 0 if value is None else value  # unfilled slots stay zero
            assert int(buffer.slots["x"][slot]) == expected
            np.testing.assert_array_equal(buffer.slots["y"][slot], np.full(2, expected / 8))
    # Filled slots are exactly 0, ..., num_filled - 1.
    assert all(v is not None for v in model[: int(buffer.num_filled)])
    assert all(v is None for v in model[int(buffer.num_filled) :])


def filled_buffer(num_slots, num_pushes):
    buffer = ResumeBuffer.empty({"x": jnp.int32(0)}, num_slots)
    for i in range(num_pushes):
        buffer = push_jit(buffer, {"x": jnp.int32(100 + i)}, True)
    return buffer


NUM_KEYS = 4000


@jax.jit
def decisions(buffer, prob, key):
    keys = jax.random.split(key, NUM_KEYS)
    return jax.vmap(lambda k: resume_decision(buffer, prob, key=k))(keys)


@jax.jit
def pops(buffer, key):
    keys = jax.random.split(key, NUM_KEYS)
    return jax.vmap(lambda k: buffer_pop(buffer, key=k))(keys)


@settings(deadline=None, max_examples=15)
@given(st.sampled_from([1, 3]), st.integers(0, 4), st.integers(0, 2**31 - 1))
def test_resume_probability(num_slots, num_pushes, seed):
    buffer = filled_buffer(num_slots, num_pushes)
    key = jax.random.key(seed)
    never = decisions(buffer, 0.0, key)
    always = decisions(buffer, 1.0, key)
    assert never.dtype == jnp.bool_ and never.shape == (NUM_KEYS,)
    assert not np.any(never)  # P_B = 0 never resumes
    if num_pushes == 0:
        # An empty buffer never resumes, whatever P_B.
        assert not np.any(always)
        assert not np.any(decisions(buffer, 0.5, key))
    else:
        assert np.all(always)  # P_B = 1 always resumes once filled
        # Intermediate P_B: binomial frequency, 5 standard deviations.
        freq = float(np.mean(decisions(buffer, 0.3, key)))
        assert abs(freq - 0.3) <= 5 * math.sqrt(0.3 * 0.7 / NUM_KEYS)


@pytest.mark.slow
@settings(deadline=None, max_examples=15)
@given(st.sampled_from([1, 2, 5]), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_pop_is_uniform_over_filled_slots(num_slots, num_pushes, seed):
    import scipy.stats  # a slow test's import, kept out of every test process's collection

    buffer = filled_buffer(num_slots, num_pushes)
    filled = int(buffer.num_filled)
    out, slot = pops(buffer, jax.random.key(seed))
    slot = np.asarray(slot)
    assert slot.dtype == np.int32
    assert slot.min() >= 0 and slot.max() < filled  # support: the filled slots only
    np.testing.assert_array_equal(out["x"], np.asarray(buffer.slots["x"])[slot])
    if filled > 1:
        # Pearson chi-square against uniform; fails by chance with probability 1e-6 per example.
        counts = np.bincount(slot, minlength=filled)
        expected = NUM_KEYS / filled
        chi2 = float(np.sum((counts - expected) ** 2 / expected))
        assert chi2 < scipy.stats.chi2.isf(1e-6, filled - 1), counts
        assert np.all(counts > 0)


def test_pop_on_empty_buffer_returns_zero_slot():
    buffer = ResumeBuffer.empty({"x": jnp.ones(3)}, 2)
    out, slot = buffer_pop(buffer, key=jax.random.key(0))
    assert int(slot) == 0
    np.testing.assert_array_equal(out["x"], np.zeros(3))


def test_vmap_over_particles_matches_one_by_one():
    num_particles, num_slots = 3, 2
    snapshot = {"w": jnp.zeros((2, 2)), "step": jnp.int32(0), "key": jax.random.key(0)}
    one = ResumeBuffer.empty(snapshot, num_slots)
    buffers = jax.vmap(lambda _: one)(jnp.arange(num_particles))
    rng = np.random.default_rng(0)

    @jax.jit
    def step(buffers, snaps, push, keys):
        buffers = jax.vmap(buffer_push)(buffers, snaps, push)
        popped = jax.vmap(lambda b, k: buffer_pop(b, key=k))(buffers, keys)
        resume = jax.vmap(lambda b, k: resume_decision(b, 0.5, key=k))(buffers, keys)
        return buffers, popped, resume

    singles = [one] * num_particles
    for t in range(5):
        snaps = {
            "w": jnp.asarray(rng.normal(size=(num_particles, 2, 2)), jnp.float32),
            "step": jnp.arange(num_particles, dtype=jnp.int32) + 10 * t,
            "key": jax.random.split(jax.random.key(t), num_particles),
        }
        push = jnp.asarray(rng.random(num_particles) < 0.6)
        keys = jax.random.split(jax.random.key(100 + t), num_particles)
        buffers, (popped, slots), resume = step(buffers, snaps, push, keys)
        for p in range(num_particles):
            snap_p = jax.tree.map(lambda x: x[p], snaps)
            singles[p] = push_jit(singles[p], snap_p, push[p])
            assert bits(jax.tree.map(lambda x: x[p], buffers)) == bits(singles[p])
            out, slot = pop_jit(singles[p], keys[p])
            assert int(slot) == int(slots[p])
            assert bits(out) == bits(jax.tree.map(lambda x: x[p], popped))
            assert bool(resume[p]) == bool(resume_jit(singles[p], 0.5, keys[p]))


def test_buffer_is_a_scan_carry():
    def body(buffer, i):
        buffer = buffer_push(buffer, {"i": i}, i % 2 == 0)
        return buffer, buffer.num_filled

    buffer = ResumeBuffer.empty({"i": jnp.int32(0)}, 2)
    buffer, filled = jax.lax.scan(body, buffer, jnp.arange(7, dtype=jnp.int32))
    np.testing.assert_array_equal(filled, [1, 1, 2, 2, 2, 2, 2])
    np.testing.assert_array_equal(buffer.slots["i"], [4, 6])  # pushes 0, 2, 4, 6 on 2 slots
    assert int(buffer.next_slot) == 0


def test_should_push_truth_table():
    before = jnp.array([1.0, 1.0, 1.0, 1.0])
    after = jnp.array([1.0, 2.0, 1.0, 2.0])
    ended = jnp.array([False, False, True, True])
    np.testing.assert_array_equal(should_push(before, after, ended), [False, True, True, True])
    # A failed window is never pushed, whatever else happened in it.
    failed = jnp.asarray([True, True, False, True])
    np.testing.assert_array_equal(
        should_push(before, after, ended, failed), [False, False, True, False]
    )
    assert bool(jax.jit(should_push)(0.0, 0.0, True))


LOSS_LENGTHS = (8, 50, 150)
scores_jit = jax.jit(difficulty_scores)


@settings(deadline=None, max_examples=40)
@given(
    st.sampled_from(LOSS_LENGTHS).flatmap(
        lambda n: st.lists(st.integers(-50, 50), min_size=n, max_size=n)
    ),
    st.integers(1, 60),
)
def test_push_index_is_the_window_holding_the_record(steps, window):
    # A random walk of losses (spiky or trending depending on the draw).
    losses = np.cumsum(np.asarray(steps, np.float32)) / 8
    scores, running_max = map(np.asarray, scores_jit(losses))
    w = int(record_window(scores, window))
    n_star = int(np.argmax(scores))
    assert w * window <= n_star < (w + 1) * window
    # Online rule: after each truncation window, push if the running max rose in it.
    # The last window pushed for a record is record_window's, whenever there is a record.
    num_windows = -(-len(losses) // window)
    pushed = []
    max_before = 0.0  # M = 0 at the start of the run
    for k in range(num_windows):
        max_after = float(running_max[min((k + 1) * window, len(losses)) - 1])
        if bool(should_push(max_before, max_after, False)):
            pushed.append(k)
        max_before = max_after
    if scores.max() > 0:
        assert pushed and pushed[-1] == w
        # Each pushing window holds a new record of V.
        for k in pushed:
            window_scores = scores[k * window : (k + 1) * window]
            assert window_scores.max() > scores[: k * window].max(initial=0.0)
    else:
        assert pushed == []


def test_record_window_batched_and_first_maximiser():
    scores = jnp.array([[0.0, 1.0], [3.0, 1.0], [3.0, 5.0], [1.0, 0.0]])
    np.testing.assert_array_equal(record_window(scores, 2), [0, 1])
    assert int(record_window(scores[:, 0], 1)) == 1  # ties: the first time the max was reached


def test_validation_errors():
    with pytest.raises(ValueError, match=r"num_slots.*>= 1.*num_slots=0"):
        ResumeBuffer.empty({"x": jnp.zeros(2)}, 0)
    with pytest.raises(ValueError, match=r"num_slots.*num_slots=-2"):
        ResumeBuffer.empty({"x": jnp.zeros(2)}, -2)
    buffer = ResumeBuffer.empty({"x": jnp.zeros(2)}, 2)
    with pytest.raises(ValueError, match=r"structure"):
        buffer_push(buffer, {"y": jnp.zeros(2)}, True)
    with pytest.raises(ValueError, match=r"\['x'\] has shape \(3,\).*\(2,\)"):
        buffer_push(buffer, {"x": jnp.zeros(3)}, True)
    with pytest.raises(ValueError, match=r"\['x'\] has dtype int32.*float32"):
        buffer_push(buffer, {"x": jnp.zeros(2, jnp.int32)}, True)
    with pytest.raises(ValueError, match=r"window_length.*>= 1.*0"):
        record_window(jnp.zeros(4), 0)


def test_restart_policy_is_chosen_from_the_resume_probability():
    fresh = elo.internal.build_restarts(elo.presets.pes_small_fc())
    assert isinstance(fresh, elo.internal.FreshRestarts)
    buffered = elo.internal.build_restarts(
        elo.presets.elo_small_fc(resume_probability=0.5, buffer_slots=3, buffer_stores_xi=True)
    )
    assert buffered == elo.internal.BufferedRestarts(
        resume_probability=0.5, num_slots=3, stores_xi=True
    )
    with pytest.raises(ValueError, match="resume_probability must lie in .* FreshRestarts"):
        elo.internal.BufferedRestarts(resume_probability=0.0, num_slots=3, stores_xi=False)


@pytest.mark.slow
def test_buffered_restarts_refuse_particles_without_a_buffer():
    config = elo.presets.pes_small_fc(tasks=("quadratic-d10",), num_particles=4)
    state = elo.init(config, key=jr.key(0))
    particle = jax.tree.map(lambda x: x[0], state.groups[0])
    assert particle.buffer is None  # fresh restarts keep no buffer
    policy = elo.internal.BufferedRestarts(resume_probability=0.5, num_slots=2, stores_xi=False)
    with pytest.raises(ValueError, match="BufferedRestarts needs particles with a resume buffer"):
        policy.restart(
            None, particle, jnp.ones((), jnp.int32), resume_key=jr.key(1), pop_key=jr.key(2)
        )
