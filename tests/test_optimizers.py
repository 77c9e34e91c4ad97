"""The learned optimizers SmallFC and Celo2: structure, weights, state, and update properties."""

import functools
import json
import pathlib
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from elo import Celo2, SmallFC
from elo.optimizers import _network, LOState
from elo.optimizers._accumulators import factored_dims
from elo.optimizers._celo2 import _EPS as CELO2_EPS, _features as celo2_features


PARITY = pathlib.Path(__file__).parent / "parity"
LOS = [SmallFC, Celo2]
WEIGHT_NAMES = ("w0", "b0", "w1", "b1", "w2", "b2")
SHAPES = {"scale": (), "bias": (7,), "w_wide": (5, 9), "w_tall": (9, 5), "conv": (3, 3, 4, 6)}
# A smaller tree (one tensor of each rank class) for tests where compile time matters.
SMALL = {"scale": (), "bias": (7,), "w_wide": (5, 9)}


def make_params(seed=0, shapes=SHAPES):
    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return {n: jax.random.normal(k, s) for k, (n, s) in zip(keys, shapes.items())}


def make_grads(seed, params, scale=1.0):
    keys = jax.random.split(jax.random.key(seed), len(params))
    return {n: scale * jax.random.normal(k, p.shape) for k, (n, p) in zip(keys, params.items())}


@pytest.fixture(scope="module", params=LOS, ids=lambda c: c.__name__)
def lo(request):
    return request.param(key=jax.random.key(0))


# These tests are dominated by XLA compile time: compile without LLVM optimisations.
FAST = {"xla_backend_optimization_level": 0}


def _update(lo, grads, state, params):
    return lo.update(grads, state, params)


# One jitted update (the optimizer is a pytree argument), so each shape compiles once.
UPDATE = jax.jit(_update, compiler_options=FAST)


@pytest.fixture(scope="module")
def update_fn():
    return UPDATE


@pytest.mark.slow
def test_meta_parameters_are_exactly_the_mlp_weights(lo):
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(lo, eqx.is_inexact_array))
    names = [jax.tree_util.keystr(path).lstrip(".") for path, _ in leaves]
    assert names == list(WEIGHT_NAMES)
    hidden, n_in, n_out = (32, 39, 2) if isinstance(lo, SmallFC) else (8, 30, 3)
    shapes = {k: v.shape for k, v in lo.export_weights().items()}
    assert shapes == {
        "w0": (n_in, hidden),
        "b0": (hidden,),
        "w1": (hidden, hidden),
        "b1": (hidden,),
        "w2": (hidden, n_out),
        "b2": (n_out,),
    }


@pytest.mark.parametrize("cls", LOS, ids=lambda c: c.__name__)
def test_haiku_style_init(cls):
    lo = cls(key=jax.random.key(3))
    n_in = lo.w0.shape[0]
    hidden = lo.w1.shape[0]
    for name, fan_in in (("w0", n_in), ("w1", hidden), ("w2", hidden)):
        w = np.asarray(getattr(lo, name))
        bound = 2.0 / np.sqrt(fan_in)
        assert np.abs(w).max() <= bound * (1 + 1e-6), name
    for name in ("b0", "b1", "b2"):
        assert np.all(np.asarray(getattr(lo, name)) == 0)
    # Truncated at 2 sigma and not rescaled: std = 0.8796 / sqrt(fan_in). With n >= 240 draws
    # the sample std is within ~10% of that (about 2 standard errors).
    w = np.asarray(lo.w0)
    assert abs(w.std() * np.sqrt(n_in) / 0.8796 - 1) < 0.1
    assert not np.array_equal(np.asarray(cls(key=jax.random.key(4)).w0), w)


@pytest.mark.parametrize("cls", LOS, ids=lambda c: c.__name__)
def test_weight_roundtrip_and_validation(cls):
    lo = cls(key=jax.random.key(0))
    other = cls(key=jax.random.key(1))
    exported = other.export_weights()
    loaded = lo.load_weights(exported)
    assert all(np.array_equal(loaded.export_weights()[k], exported[k]) for k in WEIGHT_NAMES)
    assert bool(eqx.tree_equal(cls(weights=exported), loaded))
    nested_key = "nn" if cls is SmallFC else "ff_mod_stack"
    assert bool(eqx.tree_equal(lo.load_weights({nested_key: {"~": exported}}), loaded))
    bad = dict(exported, w1=exported["w1"][:-1])
    with pytest.raises(ValueError, match="w1"):
        lo.load_weights(bad)
    with pytest.raises(ValueError, match="missing"):
        lo.load_weights({k: v for k, v in exported.items() if k != "b2"})
    with pytest.raises(ValueError, match="key"):
        cls()


@pytest.mark.parametrize("cls", LOS, ids=lambda c: c.__name__)
def test_with_hyperparameters_keeps_weights_and_changes_only_what_is_asked(cls):
    lo = cls(key=jax.random.key(0))
    change = {"clip_norm": 0.5, "warmup_fraction": 0.05}
    changed = lo.with_hyperparameters(**change)
    assert type(changed) is cls
    assert all(getattr(changed, k) is getattr(lo, k) for k in WEIGHT_NAMES)
    assert changed.hyperparameters() == {**lo.hyperparameters(), **change}
    # the same as building it with those settings and these weights
    rebuilt = cls(weights=lo.export_weights(), **{**lo.hyperparameters(), **change})
    assert bool(eqx.tree_equal(changed, rebuilt))
    # traced weights stay traced (usable inside jit)
    total = eqx.filter_jit(lambda o: o.with_hyperparameters(clip_norm=2.0).w1.sum())(lo)
    assert float(total) == pytest.approx(float(lo.w1.sum()))
    with pytest.raises(ValueError, match="unknown setting.*'nope'"):
        lo.with_hyperparameters(nope=1)
    with pytest.raises(ValueError, match="cannot change.*hidden_size"):
        lo.with_hyperparameters(hidden_size=4)
    with pytest.raises(ValueError, match="clip_norm"):
        lo.with_hyperparameters(clip_norm=0.0)


def test_celo2_test_time_schedule_decays_the_step():
    lo = Celo2(key=jax.random.key(0))
    decayed = lo.with_hyperparameters(init_lr=0.0, end_lr=0.0, warmup_fraction=0.05)
    assert float(lo.learning_rate(999, 1000)) == pytest.approx(1e-3)
    # warm-up over 50 updates to the peak, half of it halfway through the decay, 0 at the end
    assert float(decayed.learning_rate(24, 1000)) == pytest.approx(0.5e-3)
    assert float(decayed.learning_rate(49, 1000)) == pytest.approx(1e-3)
    assert float(decayed.learning_rate(524, 1000)) == pytest.approx(0.5e-3)
    assert float(decayed.learning_rate(999, 1000)) == pytest.approx(0.0, abs=1e-12)


def test_celo2_haiku_groups_are_stacked_in_numeric_order():
    lo = Celo2(key=jax.random.key(0))
    weights = lo.export_weights()
    widths = [1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3]
    starts = np.cumsum([0] + widths)
    # haiku's dict order is w0__0, w0__1, w0__10, ...: build the dict in that (wrong) order.
    groups = {f"w0__{k}": weights["w0"][starts[k] : starts[k + 1]] for k in range(14)}
    haiku = {k: groups[k] for k in sorted(groups)}
    haiku.update({k: weights[k] for k in WEIGHT_NAMES if k != "w0"})
    loaded = lo.load_weights({"ff_mod_stack": {"~": haiku}})
    assert np.array_equal(loaded.export_weights()["w0"], weights["w0"])


def test_from_config():
    for stem, cls in (("smallfc_traj_variant", SmallFC), ("celo2_traj_variant", Celo2)):
        config = json.loads((PARITY / f"{stem}.json").read_text())["config"]
        lo = cls.from_config(config, key=jax.random.key(0))
        assert lo.weight_decay == config["weight_decay"]
        assert lo.rms_decays == tuple(config["initial_rms_decays"])
        assert lo.clip_grad == config["clip_grad"]
        with pytest.warns(UserWarning, match="unknown"):
            cls.from_config(dict(config, some_new_knob=1), key=jax.random.key(0))
    config = json.loads((PARITY / "celo2_traj.json").read_text())["config"]
    with pytest.raises(ValueError, match="use_adamw_for_1d"):
        Celo2.from_config(dict(config, use_adamw_for_1d=False), key=jax.random.key(0))
    with pytest.raises(ValueError, match="normalize_output"):
        Celo2.from_config(dict(config, normalize_output=False), key=jax.random.key(0))
    with pytest.raises(ValueError, match="hidden_layers"):
        SmallFC.from_config({"hidden_layers": 3}, key=jax.random.key(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Celo2.from_config(config, key=jax.random.key(0)).adam_weight_decay is None


def test_defaults():
    small_fc = SmallFC(key=jax.random.key(0))
    assert (small_fc.step_mult, small_fc.exp_mult, small_fc.rms_decays) == (1e-3, 1e-3, (0.999,))
    assert (small_fc.init_lr, small_fc.warmup_fraction, small_fc.clip_grad) == (0.0, 0.05, False)
    celo2 = Celo2(key=jax.random.key(0))
    assert (celo2.init_lr, celo2.peak_lr, celo2.end_lr) == (1e-3, 1e-3, 1e-3)
    assert (celo2.adam_lr_mult, celo2.weight_decay, celo2.clip_grad) == (20.0, 0.0, True)
    # README meta-training values give a constant learning rate of 1e-3.
    for t in (0, 1, 7, 99):
        assert float(celo2.learning_rate(t, 100)) == pytest.approx(1e-3, rel=1e-6)
    assert small_fc.expert_b2 == 0.999 and celo2.expert_b2 == 0.95
    with pytest.raises(ValueError, match="rms_decays"):
        SmallFC(key=jax.random.key(0), rms_decays=(0.9, 0.99))
    with pytest.raises(ValueError, match="momentum_decays"):
        Celo2(key=jax.random.key(0), momentum_decays=(0.9, 1.5, 0.99))


def test_state_shapes(lo):
    params = make_params()
    state = lo.init(params, num_steps=40)
    assert isinstance(state, LOState)
    for name, shape in SHAPES.items():
        assert state.mom[name].shape == shape + (3,)
        assert state.rms[name].shape == shape + (1,)
        dims = factored_dims(shape)
        if dims is None:
            assert state.v_row[name].shape == state.v_col[name].shape == (0, 3)
            assert state.v_diag[name].shape == shape + (3,)
        else:
            d1, d0 = dims
            assert state.v_row[name].shape == tuple(np.delete(shape, d0)) + (3,)
            assert state.v_col[name].shape == tuple(np.delete(shape, d1)) + (3,)
            assert state.v_diag[name].shape == (0, 3)
    assert state.iteration.dtype == jnp.int32 and state.iteration.shape == ()
    assert state.num_steps.dtype == jnp.int32 and int(state.num_steps) == 40
    # row/col are named by size: (5, 9) and (9, 5) both give row (5, 3) and col (9, 3).
    assert state.v_row["w_tall"].shape == state.v_row["w_wide"].shape == (5, 3)


@pytest.mark.slow
def test_num_steps_is_traced(lo):
    params = make_params()
    grads = make_grads(1, params)
    traces = []

    @functools.partial(jax.jit, compiler_options=FAST)
    def run(num_steps, lo_params):
        traces.append(None)
        state = eqx.combine(lo_params, lo_static).init(params, num_steps)
        _, state = eqx.combine(lo_params, lo_static).update(grads, state, params)
        return state.num_steps, eqx.combine(lo_params, lo_static).learning_rate(0, num_steps)

    lo_params, lo_static = eqx.partition(lo, eqx.is_array)
    for n in (5, 17, 1000):
        num_steps, _ = run(jnp.asarray(n, jnp.int32), lo_params)
        assert int(num_steps) == n
    assert len(traces) == 1
    # Inner problems with different horizons in one vmapped batch.
    states = jax.vmap(lambda n: lo.init(params, n))(jnp.asarray([10, 20, 30], jnp.int32))
    assert states.num_steps.tolist() == [10, 20, 30]


@settings(deadline=None, max_examples=6)
@given(
    seed=st.integers(0, 2**31 - 1),
    log_scale=st.integers(-6, 6),
    zero=st.sampled_from(["none", "one", "all"]),
    cls=st.sampled_from(LOS),
)
def test_updates_finite(seed, log_scale, zero, cls):
    lo = _lo_of_class(cls)
    params = make_params(seed % 7)
    grads = make_grads(seed, params, scale=10.0**log_scale)
    if zero == "one":
        grads["w_wide"] = jnp.zeros_like(grads["w_wide"])
    elif zero == "all":
        grads = jax.tree.map(jnp.zeros_like, grads)
    state = lo.init(params, num_steps=50)
    for _ in range(2):
        updates, state = UPDATE(lo, grads, state, params)
        assert all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree.leaves(updates))
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(state))


@functools.cache
def _lo_of_class(cls):
    """One optimizer per class for the Hypothesis examples, built when first needed (not when
    the module is collected: every test process collects it)."""
    return cls(key=jax.random.key(5), init_lr=1e-3)


@pytest.mark.slow
def test_features_do_not_depend_on_the_tree_around_a_tensor(lo, update_fn):
    # Without global-norm clipping every tensor is updated on its own: the same tensor in two
    # different pytrees gets the same update, up to float32 rounding. Small tensors share their
    # MLP matmuls with their neighbours, which changes the summation order, so an element's
    # rounding error is relative to the size of the MLP's terms (~ the largest update), not to
    # the element: a few float32 ulps of the tensor's largest update (1e-6 ~ 8 ulps). Celo2 then
    # orthogonalises the MLP's output with five Newton-Schulz iterations (15 more matmuls in
    # sequence, each rounding again), so its bound is 4e-6 ~ 32 ulps; a feature that depended
    # on the neighbours would change the update by orders of magnitude more. (12 ulps were
    # measured for Celo2 on a 2-core AMD EPYC host with jax 0.10.2.)
    lo = type(lo)(weights=lo.export_weights(), clip_grad=False)
    ulps = 4e-6 if isinstance(lo, Celo2) else 1e-6
    x = jax.random.normal(jax.random.key(0), (6, 10))
    gx = jax.random.normal(jax.random.key(1), (6, 10))
    tree_a = {"x": x}
    tree_b = {"a": [jnp.ones(3), {"inner": x}], "b": jnp.ones((4, 4, 2))}
    grads_b = {"a": [jnp.ones(3), {"inner": gx}], "b": jnp.full((4, 4, 2), 7.0)}
    state_a, state_b = lo.init(tree_a, 100), lo.init(tree_b, 100)
    for _ in range(3):
        ua, state_a = update_fn(lo, {"x": gx}, state_a, tree_a)
        ub, state_b = update_fn(lo, grads_b, state_b, tree_b)
        scale = float(jnp.max(jnp.abs(ua["x"])))
        np.testing.assert_allclose(ua["x"], ub["a"][1]["inner"], rtol=1e-6, atol=ulps * scale)


@pytest.mark.slow
def test_jit_and_vmap_over_optimizee_states(lo, update_fn):
    params = make_params(shapes=SMALL)
    batch = 3
    batched_params = jax.tree.map(lambda p: jnp.stack([p * (i + 1) for i in range(batch)]), params)
    batched_grads = jax.tree.map(lambda p: 0.1 * jnp.sin(p), batched_params)
    states = jax.vmap(lambda p: lo.init(p, 30))(batched_params)
    vupdate = jax.jit(jax.vmap(_update, in_axes=(None, 0, 0, 0)), compiler_options=FAST)
    updates, new_states = vupdate(lo, batched_grads, states, batched_params)
    for i in range(batch):
        pick = lambda t: jax.tree.map(lambda x: x[i], t)
        u_i, s_i = update_fn(lo, pick(batched_grads), pick(states), pick(batched_params))
        np.testing.assert_allclose(
            jnp.concatenate([x.ravel() for x in jax.tree.leaves(pick(updates))]),
            jnp.concatenate([x.ravel() for x in jax.tree.leaves(u_i)]),
            # Batched matmuls round differently; Newton-Schulz amplifies that for Celo2's
            # smallest entries. 1e-8 is 1e-5 of the learning rate, the scale of the steps.
            rtol=1e-5,
            atol=1e-8,
        )
        assert bool(eqx.tree_equal(pick(new_states), s_i, rtol=1e-5, atol=1e-10))
    assert new_states.iteration.tolist() == [1] * batch


def _reference_direction(lo, p, g, m, rms, fac_g, v_row, v_col, v_diag, t):
    """The MLP written as the reference does: explicit features, one matmul per layer."""
    out = lo.tensor_outputs(p, g, m, rms, fac_g, v_row, v_col, v_diag, iteration=t)
    with jax.numpy_rank_promotion("allow"):
        h = jax.nn.relu(out["features"] @ lo.w0 + lo.b0)
        h = jax.nn.relu(h @ lo.w1 + lo.b1)
        o = h @ lo.w2 + lo.b2
    return o[..., 0] * jnp.exp(lo.exp_mult * o[..., 1])


def _assert_small_fc_matches_reference_formulation(update_fn, lo, shapes, *, seed):
    """The first update of every tensor equals the plain "all 39 features, one matmul"
    formulation applied to that tensor alone (`lo` has `init_lr=1e-3`)."""
    params = make_params(seed, shapes)
    grads = make_grads(seed + 1, params)
    state = lo.init(params, 100)
    updates, _ = update_fn(lo, grads, state, params)
    acc, fac_g = lo.accumulate(state, grads)
    reference = jax.jit(_reference_direction, static_argnums=9, compiler_options=FAST)
    for n in shapes:
        args = (acc.mom[n], acc.rms[n], fac_g[n], acc.v_row[n], acc.v_col[n], acc.v_diag[n])
        step = reference(lo, params[n], grads[n], *args, 0)
        # Same arithmetic up to float32 summation order in the first layer (~1e-6 relative on
        # O(1) pre-activations); `atol` covers outputs that cancel to near 0 (1e-5 of lr*|d|).
        np.testing.assert_allclose(updates[n], -1e-3 * step, rtol=1e-5, atol=1e-8, err_msg=n)


@pytest.mark.slow
def test_small_fc_fast_path_matches_reference_formulation(update_fn):
    # Large tensors take the blocked, factored implementation (a matrix, a conv kernel and a long
    # vector here); it must equal the plain "all 39 features, one matmul" formulation.
    lo = SmallFC(key=jax.random.key(0), init_lr=1e-3)
    block = _network.BLOCK_SIZE
    shapes = {"matrix": (block // 40 + 3, 80), "conv": (3, 3, 40, 64), "vector": (2 * block + 5,)}
    for shape in shapes.values():  # all are split into blocks (matrix, vector: with a remainder)
        assert _network._block_rows(shape, block) < shape[0]
    _assert_small_fc_matches_reference_formulation(update_fn, lo, shapes, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_size", [1000, None])
def test_celo2_streamed_and_merged_directions_match_reference_formulation(chunk_size):
    # A matrix above MERGE_SIZE is streamed through the MLP chunk by chunk (`streamed_mlp`),
    # small ones share one first layer of multiply-adds (`_merged_mlp`): both must equal the
    # plain "all 30 features, one matmul per layer" direction of that tensor alone.
    lo = Celo2(key=jax.random.key(0))
    shapes = {"big": (_network.MERGE_SIZE // 80 + 3, 80), "w_wide": (5, 9), "w_tall": (9, 5)}
    params = make_params(7, shapes)
    grads = make_grads(8, params)
    state = lo.init(params, 100)
    acc, fac_g = lo.accumulate(state, grads)
    per_tensor = {
        n: (params[n], grads[n], acc.mom[n], acc.rms[n], fac_g[n], acc.v_row[n], acc.v_col[n])
        for n in shapes
    }
    p, g, m, v, _, v_row, v_col = per_tensor["big"]
    streamed = jax.jit(lambda *a: lo._large_direction(*a, chunk_size), compiler_options=FAST)(
        p, g, m, v, v_row, v_col
    )
    small = ["w_wide", "w_tall"]
    feats = [celo2_features(*per_tensor[n]) for n in small]
    merged = _network._merged_mlp(feats, [(0, 1)] * len(small), lo.w0, lo.b0, lo._rest, CELO2_EPS)
    directions = {"big": streamed, **{n: d for n, (d,) in zip(small, merged)}}
    for n, direction in directions.items():
        features = lo.tensor_outputs(*per_tensor[n])["features"]
        with jax.numpy_rank_promotion("allow"):
            h = jax.nn.relu(features @ lo.w0 + lo.b0)
            h = jax.nn.relu(h @ lo.w1 + lo.b1)
            reference = h @ lo.w2[:, 0] + lo.b2[0]
        scale = float(jnp.max(jnp.abs(reference)))
        np.testing.assert_allclose(direction, reference, rtol=1e-5, atol=1e-5 * scale, err_msg=n)


@pytest.mark.slow
def test_small_fc_merged_small_tensors_match_reference_formulation(update_fn):
    # Small tensors share their MLP matmuls (concatenated along the element axis, grouped by
    # first-layer rows); each must still get the plain per-tensor formulation's update.
    lo = SmallFC(key=jax.random.key(0), init_lr=1e-3)
    shapes = {**SHAPES, "w_square": (6, 6), "stack": (2, 5, 3), "bias2": (11,)}
    sizes = [int(np.prod(s)) for s in shapes.values()]
    assert max(sizes) <= _network.MERGE_SIZE
    groups = _network._merge_groups(sizes, _network.MERGE_SIZE, _network.BLOCK_SIZE)
    assert groups == [list(range(len(sizes)))]
    _assert_small_fc_matches_reference_formulation(update_fn, lo, shapes, seed=3)


@pytest.mark.slow
def test_merging_small_tensors_does_not_change_any_update(lo, monkeypatch):
    # Every tensor kind (scalar, vector, matrix, stack of matrices, conv kernel), with a large
    # tensor in the middle of the small ones: merged (default) and one tensor at a time must
    # agree up to float32 rounding, for both learned optimizers.
    lo = type(lo)(weights=lo.export_weights(), clip_grad=False)
    shapes = {**SHAPES, "big": (_network.MERGE_SIZE + 1,), "stack": (2, 5, 3), "tail": (4,)}
    params = make_params(5, shapes)
    grads = make_grads(6, params)
    state = lo.init(params, 100)
    # New functions each time: a jit cache hit would skip the re-trace with the patched size.
    merged, _ = jax.jit(lambda g, s, p: lo.update(g, s, p), compiler_options=FAST)(
        grads, state, params
    )
    monkeypatch.setattr(_network, "MERGE_SIZE", 0)
    alone, _ = jax.jit(lambda g, s, p: lo.update(g, s, p), compiler_options=FAST)(
        grads, state, params
    )
    for name in shapes:
        scale = float(jnp.max(jnp.abs(alone[name])))
        np.testing.assert_allclose(
            merged[name], alone[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name
        )


@settings(deadline=None, max_examples=300)
@given(
    sizes=st.lists(st.integers(1, 100), min_size=1, max_size=30),
    merge_size=st.integers(0, 100),
    limit=st.integers(1, 150),
)
def test_merge_groups_are_consecutive_small_and_within_the_limit(sizes, merge_size, limit):
    groups = _network._merge_groups(sizes, merge_size, limit)
    assert [i for g in groups for i in g] == list(range(len(sizes)))
    for g in groups:
        if any(sizes[i] > merge_size for i in g):
            assert len(g) == 1  # a large tensor is always alone
        if len(g) > 1:
            assert sum(sizes[i] for i in g) <= limit
    # Greedy: a group of small tensors is closed only by a large one or one that does not fit.
    for g, nxt in zip(groups, groups[1:]):
        i = nxt[0]
        if all(sizes[j] <= merge_size for j in g) and sizes[i] <= merge_size:
            assert sum(sizes[j] for j in g) + sizes[i] > limit


def test_celo2_routing_and_imitation_leaves(update_fn):
    lo = Celo2(key=jax.random.key(0))
    params = {
        "tok_embed": jnp.ones((11, 4)),
        "w": jnp.ones((4, 5)),
        "b": jnp.ones(5),
        "s": jnp.ones(()),
    }
    assert lo.imitation_leaves(params) == {"tok_embed": False, "w": True, "b": False, "s": False}
    small_fc = SmallFC(key=jax.random.key(0))
    assert small_fc.imitation_leaves(params) == {"tok_embed": True, "w": True, "b": True, "s": True}
    assert (SmallFC.imitation_magnitude, Celo2.imitation_magnitude) == ("norm", "elementwise")
    # The matrix step is orthogonalised and RMS-normalised: unit RMS, so |update| RMS = lr.
    grads = make_grads(0, params)
    updates, _ = update_fn(lo, grads, lo.init(params, 10), params)
    assert float(jnp.sqrt(jnp.mean(updates["w"] ** 2))) == pytest.approx(1e-3, rel=1e-4)


def test_learning_rate_schedules():
    small_fc = SmallFC(key=jax.random.key(0), init_lr=0.0, warmup_fraction=0.1)
    lrs = [float(small_fc.learning_rate(t, 40)) for t in range(6)]
    # Warmup over W = 4 steps, starting at init_lr for t = 0.
    assert lrs == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])
    celo2 = Celo2(key=jax.random.key(0), init_lr=0.0, peak_lr=1e-3, end_lr=0.0, warmup_fraction=0.1)
    # Update t uses S(t + 1).
    assert float(celo2.learning_rate(0, 40)) == pytest.approx(2.5e-4)
    assert float(celo2.learning_rate(39, 40)) == pytest.approx(0.0, abs=1e-12)


def test_bfloat16_params(lo, update_fn):
    params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), make_params(shapes=SMALL))
    grads = jax.tree.map(lambda x: x.astype(jnp.bfloat16), make_grads(1, params))
    state = lo.init(params, 10)
    updates, state = update_fn(lo, grads, state, params)
    assert all(u.dtype == jnp.bfloat16 for u in jax.tree.leaves(updates))
    assert all(m.dtype == jnp.bfloat16 for m in jax.tree.leaves(state.mom))


def test_clear_errors(lo):
    params = make_params(shapes=SMALL)
    state = lo.init(params, 10)
    # (Under the test suite's runtime type checking the annotation catches it first.)
    with pytest.raises(TypeError):
        lo.init({"a": jnp.ones(3, jnp.int32)}, 10)
    with pytest.raises(ValueError, match="tree structure"):
        lo.update({"w_wide": params["w_wide"]}, state, {"w_wide": params["w_wide"]})
    wrong = dict(params, w_wide=jnp.ones((9, 5)))
    with pytest.raises(ValueError, match="shape"):
        lo.update(wrong, state, wrong)


@pytest.mark.slow
@settings(deadline=None, max_examples=60)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
)
def test_mean_square_equals_the_plain_reduction(shape, data):
    axes = tuple(
        sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape))))
    )
    x = np.random.default_rng(len(shape)).normal(size=shape).astype(np.float32)

    # One compiled program per example (eager ops would compile one program per op and shape).
    @jax.jit
    def both(x):
        return _network.mean_square(x, axes), jnp.mean(jnp.square(x), axis=axes, keepdims=True)

    got, expected = both(x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6)
