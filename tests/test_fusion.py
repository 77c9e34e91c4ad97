"""Fused expert/learned-optimizer steps, the imitation losses, and the experts' moments."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from elo import Celo2, SmallFC
from elo._inner._fusion import fused_step, FusedStep, imitation_losses
from elo.optimizers import adamw_expert, muon_expert


SHAPES = {"scale": (), "bias": (7,), "w": (5, 9)}
# These tests are dominated by XLA compile time: compile without LLVM optimisations.
FAST = {"xla_backend_optimization_level": 0}


def fast_jit(fn):
    return jax.jit(fn, compiler_options=FAST)


def make_tree(seed, scale=1.0):
    keys = jax.random.split(jax.random.key(seed), len(SHAPES))
    return {n: scale * jax.random.normal(k, s) for k, (n, s) in zip(keys, SHAPES.items())}


@functools.cache
def build(name):
    lo_name, expert_name = name.split("-")
    lo = {"SmallFC": SmallFC, "Celo2": Celo2}[lo_name](key=jax.random.key(0), init_lr=1e-3)
    expert = {"adamw": adamw_expert, "muon": muon_expert}[expert_name](b2=lo.expert_b2)

    @fast_jit
    def step(alpha, grads, expert_state, lo_state, params):
        return fused_step(expert, lo, alpha, grads, expert_state, lo_state, params)

    @fast_jit
    def endpoints(grads, expert_state, lo_state, params):
        # In one program with the fused steps, so that both see the same XLA rounding.
        pre = lo.preprocess_grads(grads)
        u_e, _ = expert.update(pre, expert_state, params)
        u_o, _ = lo.update(grads, lo_state, params)
        p_e = jax.tree.map(lambda p, u: p + u, params, u_e)
        p_o = jax.tree.map(lambda p, u: p + u, params, u_o)
        fused = [
            fused_step(expert, lo, a, grads, expert_state, lo_state, params)
            for a in (0.0, 1.0, 0.25)
        ]
        return p_e, p_o, fused

    return lo, expert, step, endpoints


@pytest.fixture(scope="module", params=["SmallFC-adamw", "SmallFC-muon", "Celo2-muon"])
def setup(request):
    return build(request.param)


@pytest.fixture(scope="module", params=["SmallFC-adamw", "Celo2-muon"])
def vmap_setup(request):
    return build(request.param)


def _bitwise_equal(a, b):
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))
    )


def test_alpha_endpoints_are_bitwise_and_middle_is_convex(setup):
    lo, expert, _, endpoints = setup
    params = make_tree(0)
    expert_state, lo_state = expert.init(params), lo.init(params, 100)
    grads = make_tree(1, scale=3.0)  # global norm > 1: Celo2 clips, and so must the expert
    p_e, p_o, (out0, out1, out) = endpoints(grads, expert_state, lo_state, params)
    assert isinstance(out0, FusedStep)
    assert _bitwise_equal(out0.params, p_e)
    assert _bitwise_equal(out1.params, p_o)
    assert _bitwise_equal(out0.expert_delta, jax.tree.map(lambda a, p: a - p, p_e, params))
    assert _bitwise_equal(out1.lo_delta, jax.tree.map(lambda a, p: a - p, p_o, params))
    mix = jax.tree.map(lambda e, o: 0.75 * e + 0.25 * o, p_e, p_o)
    assert bool(eqx.tree_equal(out.params, mix, rtol=1e-6, atol=1e-7))
    # The states advance the same way whatever alpha is.
    assert bool(eqx.tree_equal(out.lo_state, out0.lo_state))
    assert int(out.lo_state.iteration) == 1


def test_adamw_expert_moments_are_the_lo_accumulators():
    lo = SmallFC(key=jax.random.key(0), clip_grad=True)
    expert = adamw_expert(b2=lo.expert_b2)
    step = fast_jit(lambda a, g, es, ls, p: fused_step(expert, lo, a, g, es, ls, p))
    params = make_tree(0)
    expert_state, lo_state = expert.init(params), lo.init(params, 100)
    for t in range(4):
        out = step(0.5, make_tree(10 + t, scale=10.0**t), expert_state, lo_state, params)
        params, expert_state, lo_state = out.params, out.expert_state, out.lo_state
    adam = expert_state[0]
    # The same float32 recursions on the same preprocessed gradients; XLA may contract a
    # multiply-add into an FMA in one program and not the other: equal to within a few ulp.
    for name in SHAPES:
        np.testing.assert_array_max_ulp(adam.mu[name], lo_state.mom[name][..., 0], maxulp=4)
        np.testing.assert_array_max_ulp(adam.nu[name], lo_state.rms[name][..., 0], maxulp=4)


@pytest.mark.slow
def test_jit_vmap_fused_step(vmap_setup):
    lo, expert, step, _ = vmap_setup
    batch = 2
    params = jax.vmap(make_tree)(jnp.arange(batch))
    grads = jax.vmap(lambda s: make_tree(s + 100))(jnp.arange(batch))
    expert_states = jax.vmap(expert.init)(params)
    lo_states = jax.vmap(lambda p: lo.init(p, 50))(params)
    alphas = jnp.asarray([0.3, 1.0])
    out = jax.vmap(step)(alphas, grads, expert_states, lo_states, params)
    for i in range(batch):
        pick = lambda t: jax.tree.map(lambda x: x[i], t)
        ref = step(alphas[i], pick(grads), pick(expert_states), pick(lo_states), pick(params))
        assert bool(eqx.tree_equal(pick(out.params), ref.params, rtol=1e-5, atol=1e-8))


# Fixed sizes (values drawn from ints, sparse zeros likely) so each shape compiles once.
vectors = st.lists(st.integers(-1000, 1000) | st.just(0), min_size=8, max_size=8)


def _tree(values, offset=0):
    x = jnp.asarray(values, jnp.float32) / 100.0
    return {"a": x[:5], "b": jnp.roll(x, offset)[5:] * 2.0}


@settings(deadline=None, max_examples=30)
@given(
    u=vectors, v=vectors, c=st.floats(1e-3, 1e3), magnitude=st.sampled_from(["norm", "elementwise"])
)
def test_imitation_loss_properties(u, v, c, magnitude):
    du, dv = _tree(u), _tree(v, offset=1)
    l_dir, l_mag = imitation_losses(du, dv, magnitude=magnitude)
    assert 0.0 <= float(l_dir) <= 2.0
    # Symmetric in its arguments.
    l_dir2, l_mag2 = imitation_losses(dv, du, magnitude=magnitude)
    assert float(l_dir2) == pytest.approx(float(l_dir), abs=1e-6)
    assert float(l_mag2) == pytest.approx(float(l_mag), rel=1e-6, abs=1e-12)
    nonzero = any(x != 0 for x in u)
    scaled = jax.tree.map(lambda x: c * x, du)
    parallel, mag_parallel = imitation_losses(du, scaled, magnitude=magnitude)
    antiparallel, _ = imitation_losses(du, jax.tree.map(lambda x: -x, scaled), magnitude=magnitude)
    if nonzero:
        # float32: cos = <x, cx> / (|x||cx|) is 1 up to a few ulp.
        assert float(parallel) == pytest.approx(0.0, abs=1e-6)
        assert float(antiparallel) == pytest.approx(2.0, abs=1e-6)
    else:
        assert float(parallel) == 1.0  # both steps zero
    # L_mag(x, c x) = |c - 1| * size(x): zero iff the sizes match (c = 1)...
    flat = np.concatenate([np.ravel(x) for x in jax.tree.leaves(du)]).astype(np.float64)
    size = np.linalg.norm(flat) if magnitude == "norm" else np.mean(np.abs(flat))
    assert float(mag_parallel) == pytest.approx(abs(c - 1) * size, rel=1e-5, abs=1e-6 * size)
    # ... whatever the directions: a sign flip keeps the sizes.
    _, mag_flip = imitation_losses(du, jax.tree.map(lambda x: -x, du), magnitude=magnitude)
    assert float(mag_flip) == 0.0


def test_imitation_loss_values():
    e = {"x": jnp.asarray([3.0, 0.0]), "y": jnp.asarray([0.0])}
    o = {"x": jnp.asarray([0.0, 4.0]), "y": jnp.asarray([-1.0])}
    l_dir, l_mag = imitation_losses(e, o)
    assert float(l_dir) == pytest.approx(1.0)
    assert float(l_mag) == pytest.approx(np.sqrt(17.0) - 3.0)
    l_dir, l_mag = imitation_losses(e, o, magnitude="elementwise")
    assert float(l_mag) == pytest.approx((3 + 4 + 1) / 3)
    l_dir, l_mag = imitation_losses(e, o, magnitude="elementwise", include={"x": True, "y": False})
    assert float(l_mag) == pytest.approx((3 + 4) / 2)
    with pytest.raises(ValueError, match="at least one"):
        imitation_losses(e, o, include={"x": False, "y": False})


def test_fused_step_losses_use_the_lo_description():
    lo = Celo2(key=jax.random.key(0))
    expert = muon_expert(b2=lo.expert_b2)
    params = {"tok_embed": jnp.ones((6, 3)), "w": jnp.ones((4, 5)), "b": jnp.ones(5)}
    grads = jax.tree.map(lambda p: 0.1 * jnp.cos(jnp.arange(p.size).reshape(p.shape)), params)
    include = lo.imitation_leaves(params)

    @fast_jit
    def run(grads, params):
        out = fused_step(expert, lo, 0.5, grads, expert.init(params), lo.init(params, 10), params)
        losses = imitation_losses(
            out.expert_delta, out.lo_delta, magnitude=lo.imitation_magnitude, include=include
        )
        only_w = imitation_losses(
            {"w": out.expert_delta["w"]}, {"w": out.lo_delta["w"]}, magnitude="elementwise"
        )
        return losses, only_w

    (l_dir, l_mag), only_w = run(grads, params)
    assert float(l_dir) == pytest.approx(float(only_w[0]), abs=1e-6)
    assert float(l_mag) == pytest.approx(float(only_w[1]), rel=1e-6)


@pytest.mark.slow
def test_muon_expert_routing():
    expert = muon_expert(learning_rate=0.1, b2=0.95)
    params = {"m": jnp.ones((4, 6)), "v": jnp.ones(6), "c": jnp.ones((2, 2, 3, 3))}
    keys = dict(zip(params, jax.random.split(jax.random.key(0), 3)))
    grads = {n: jax.random.normal(keys[n], p.shape) for n, p in params.items()}
    updates, _ = fast_jit(expert.update)(grads, expert.init(params), params)
    # Matrix: orthogonalised, scaled by sqrt(max(1, 6/4)); the rest: Adam's first step,
    # -0.3 * lr * sign(g).
    sv = np.linalg.svd(np.asarray(updates["m"]) / (-0.1 * np.sqrt(1.5)), compute_uv=False)
    assert np.all((sv > 0.6) & (sv < 1.25))
    for name in ("v", "c"):
        np.testing.assert_allclose(updates[name], -0.03 * np.sign(grads[name]), rtol=1e-4)
    adamw = adamw_expert(learning_rate=0.1, b2=0.999)
    upd, _ = fast_jit(adamw.update)(grads, adamw.init(params), params)
    np.testing.assert_allclose(upd["m"], -0.1 * np.sign(grads["m"]), rtol=1e-4)
    assert isinstance(expert, optax.GradientTransformation)
