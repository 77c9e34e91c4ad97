"""The learned optimizers at model scale: chunked updates, sharded and bfloat16 parameters."""

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from elo import as_optax, Celo2, SmallFC
from elo.internal import hlo_collectives
from elo.optimizers import _chunked


# Compile quickly: these tests are dominated by XLA compile time, not by run time.
FAST = {"xla_backend_optimization_level": 0}
# Large tensors (more than 8192 elements: streamed in chunks; "big" also at the CPU default) of
# every kind, with small ones between them (which share their matmuls and must keep doing so).
SHAPES = {
    "matrix": (300, 70),
    "bias": (70,),
    "conv": (3, 3, 40, 64),
    "vector": (20005,),
    "scalar": (),
    "small": (5, 9),
    "square": (96, 96),
    "big": (200, 200),
}


def make_problem(seed, shapes=SHAPES, dtype=jnp.float32):
    keys = jax.random.split(jax.random.key(seed), 2 * len(shapes))
    params = {k: jax.random.normal(keys[i], s, dtype) for i, (k, s) in enumerate(shapes.items())}
    grads = {
        k: (0.1 * jax.random.normal(keys[len(shapes) + i], s)).astype(dtype)
        for i, (k, s) in enumerate(shapes.items())
    }
    return params, grads


def advanced_state(lo, params, grads, steps=3):
    """A state after a few updates, so no statistic is zero."""
    state = lo.init(params, 100)
    step = jax.jit(lambda g, s, p: lo.update(g, s, p), compiler_options=FAST)
    for _ in range(steps):
        _, state = step(grads, state, params)
    return state


@pytest.fixture(params=[SmallFC, Celo2], ids=lambda c: c.__name__)
def lo(request):
    if request.param is SmallFC:
        return SmallFC(key=jax.random.key(0), init_lr=1e-3)
    return Celo2(key=jax.random.key(0))


@settings(deadline=None, max_examples=200)
@given(
    shape=st.lists(st.integers(1, 60), min_size=1, max_size=4).map(tuple),
    chunk_size=st.integers(1, 5000),
    multiple=st.sampled_from([1, 2, 4]),
)
def test_chunk_layout_splits_evenly_on_every_shard(shape, chunk_size, multiple):
    multiples = (multiple,) * len(shape)
    layout = _chunked.chunk_layout(shape, chunk_size, multiples)
    n = math.prod(shape)
    if n <= chunk_size:
        assert layout is None
        return
    if layout is None:  # no axis splits into several chunks of a multiple of `multiple` rows
        assert all(not any(s % r == 0 for r in range(multiple, s, multiple)) for s in shape)
        return
    axis, rows = layout
    assert shape[axis] % rows == 0 and rows % multiple == 0 and rows < shape[axis]
    elements = rows * n // shape[axis]
    fitting = {
        (a, r * n // s)
        for a, s in enumerate(shape)
        for r in range(multiple, s, multiple)
        if s % r == 0 and r * n // s <= chunk_size
    }
    if not fitting:
        return
    largest = max(e for _, e in fitting)
    preferred = {
        (a, e)
        for a, e in fitting
        if math.prod(shape[a + 1 :]) >= _chunked.MIN_CONTIGUOUS_RUN and 2 * e >= largest
    }
    # The largest chunk that fits; one of contiguous runs if one is at least half as large.
    assert elements == max(e for _, e in (preferred or fitting))
    if preferred:
        assert math.prod(shape[axis + 1 :]) >= _chunked.MIN_CONTIGUOUS_RUN


def test_chunk_layout_prefers_rows_to_columns_of_a_wide_matrix():
    # A column chunk of a 32768 x 3072 matrix would hold more elements (32768) than 8 rows
    # (24576), but its elements lie 3072 apart.
    assert _chunked.chunk_layout((32768, 3072), 32768, (1, 1)) == (0, 8)
    assert _chunked.chunk_layout((32768, 1024), 32768, (1, 1)) == (0, 32)
    # Rows of a 4 x 100000 matrix do not fit: columns, although their runs are 1 element.
    assert _chunked.chunk_layout((4, 100_000), 32768, (1, 1)) == (1, 6250)
    # Contiguous chunks far smaller than the largest that fits are not preferred: 1021 chunks
    # of one row would replace 16 column chunks.
    assert _chunked.chunk_layout((1021, 512), 32768, (1, 1)) == (1, 32)


@pytest.mark.slow
def test_chunked_update_equals_unchunked(lo):
    # Chunked (1000 elements at a time, the CPU default and no chunking at all) and unchunked
    # updates agree up to float32 summation order; the new states are identical.
    params, grads = make_problem(0)
    state = advanced_state(lo, params, grads)
    results = {
        chunk_size: jax.jit(
            lambda g, s, p, c=chunk_size: lo.update(g, s, p, chunk_size=c), compiler_options=FAST
        )(grads, state, params)
        for chunk_size in (1000, None, 10**9)
    }
    unchunked, unchunked_state = results[10**9]
    for chunk_size in (1000, None):
        updates, new_state = results[chunk_size]
        assert jax.tree.all(jax.tree.map(jnp.array_equal, new_state, unchunked_state))
        for name in SHAPES:
            scale = float(jnp.max(jnp.abs(unchunked[name])))
            np.testing.assert_allclose(
                updates[name], unchunked[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name
            )


def test_chunk_size_is_checked():
    lo = SmallFC(key=jax.random.key(0))
    # The suite type-checks `elo` at run time, which rejects non-ints first; the unwrapped
    # function shows the library's own ValueError that users without such checks get.
    unchecked = inspect.unwrap(as_optax)
    for bad in (0, -1, True, 1.5, "8192"):
        with pytest.raises(ValueError, match="chunk_size=.*positive int.*got"):
            unchecked(lo, num_steps=10, chunk_size=bad)
    params, grads = make_problem(0, {"w": (4, 4)})
    with pytest.raises(
        ValueError, match="SmallFC.update\\(chunk_size=...\\) must be a positive int"
    ):
        lo.update(grads, lo.init(params, 10), params, chunk_size=0)


def _sharded_problem(mesh):
    params, grads = make_problem(1, {"rows": (1024, 256), "cols": (256, 1024), "bias": (256,)})
    specs = {"rows": P("d", None), "cols": P(None, "d"), "bias": P("d")}
    place = lambda tree: {
        k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in tree.items()
    }
    return params, grads, place(params), place(grads), specs


def _compiled_update(opt, grads, state, params):
    return jax.jit(lambda g, s, p: opt.update(g, s, p)).lower(grads, state, params).compile()


@pytest.mark.slow
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=str)
def test_small_fc_on_sharded_parameters_keeps_the_sharding_and_gathers_nothing(axis_type):
    mesh = jax.make_mesh((4,), ("d",), axis_types=(axis_type,))
    params, grads, sharded_params, sharded_grads, specs = _sharded_problem(mesh)
    opt = as_optax(SmallFC(key=jax.random.key(0), init_lr=1e-3), num_steps=100)
    state = opt.init(sharded_params)
    for name, spec in specs.items():
        expected = NamedSharding(mesh, P(*spec, None))
        assert state.mom[name].sharding.is_equivalent_to(expected, 3), name
    compiled = _compiled_update(opt, sharded_grads, state, sharded_params)
    updates, new_state = compiled(sharded_grads, state, sharded_params)
    for name, spec in specs.items():
        assert updates[name].sharding.is_equivalent_to(NamedSharding(mesh, spec), 2), name
        assert new_state.mom[name].sharding.is_equivalent_to(state.mom[name].sharding, 3), name
    collectives = hlo_collectives(compiled.as_text())
    assert not collectives["all-gather"]
    assert not collectives["all-to-all"] and not collectives["collective-permute"]
    # Only statistics are reduced across devices (per-tensor mean squares, Adafactor row and
    # column sums): nothing of the size of a parameter.
    for shape in collectives["all-reduce"]:
        sizes = [math.prod(int(n) for n in s.split(",") if n) for s in _shapes_in(shape)]
        assert max(sizes) <= 1024 * 3, shape
    expected, _ = jax.jit(lambda g, s, p: opt.update(g, s, p))(grads, opt.init(params), params)
    for name in specs:
        scale = float(jnp.max(jnp.abs(expected[name])))
        np.testing.assert_allclose(
            updates[name], expected[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name
        )


def _shapes_in(text: str) -> list[str]:
    """The dimension lists of the HLO array shapes in `text` (`f32[3,4]{1,0}` gives `3,4`)."""
    out = []
    for piece in text.split("[")[1:]:
        out.append(piece.split("]")[0])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=str)
def test_celo2_on_sharded_parameters_moves_only_the_direction_for_newton_schulz(axis_type):
    # Newton-Schulz multiplies whole matrices: each sharded matrix's update direction moves to
    # one device for it and back (`newton_schulz_many`; under an Explicit mesh by all-to-alls,
    # no all-gather of a whole matrix), under an Auto mesh the compiler follows the same
    # constraints. Either way the updates keep the parameters' sharding and equal the
    # unsharded ones.
    mesh = jax.make_mesh((4,), ("d",), axis_types=(axis_type,))
    params, grads, sharded_params, sharded_grads, specs = _sharded_problem(mesh)
    opt = as_optax(Celo2(key=jax.random.key(0)), num_steps=100)
    state = opt.init(sharded_params)
    compiled = _compiled_update(opt, sharded_grads, state, sharded_params)
    updates, _ = compiled(sharded_grads, state, sharded_params)
    for name, spec in specs.items():
        assert updates[name].sharding.is_equivalent_to(NamedSharding(mesh, spec), 2), name
    if axis_type == AxisType.Explicit:
        collectives = hlo_collectives(compiled.as_text())
        whole = [
            s for s in collectives["all-gather"] if _shapes_in(s)[0] in ("1024,256", "256,1024")
        ]
        assert not whole
        assert len(collectives["all-to-all"]) == 4  # each matrix to one device and back
    expected, _ = jax.jit(lambda g, s, p: opt.update(g, s, p))(grads, opt.init(params), params)
    for name in specs:
        scale = float(jnp.max(jnp.abs(expected[name])))
        np.testing.assert_allclose(
            updates[name], expected[name], rtol=1e-4, atol=1e-5 * scale, err_msg=name
        )


@pytest.mark.slow
def test_bfloat16_parameters(lo):
    # bfloat16 parameters and gradients: float32 inside, bfloat16 updates and momenta; the
    # update is the float32 computation's on the same (bfloat16-valued) inputs, up to the
    # rounding of the bfloat16 state.
    params, grads = make_problem(2, dtype=jnp.bfloat16)
    state = lo.init(params, 100)
    updates, new_state = jax.jit(lambda g, s, p: lo.update(g, s, p), compiler_options=FAST)(
        grads, state, params
    )
    for name in SHAPES:
        assert updates[name].dtype == jnp.bfloat16, name
        assert new_state.mom[name].dtype == jnp.bfloat16, name
        assert new_state.rms[name].dtype == jnp.bfloat16, name
        assert bool(jnp.all(jnp.isfinite(updates[name].astype(jnp.float32)))), name
    as_f32 = lambda tree: jax.tree.map(lambda x: x.astype(jnp.float32), tree)
    p32, g32 = as_f32(params), as_f32(grads)
    expected, _ = jax.jit(lambda g, s, p: lo.update(g, s, p), compiler_options=FAST)(
        g32, lo.init(p32, 100), p32
    )
    # Relative to the largest update: a tensor whose direction nearly cancels (the scalar) has
    # a tiny update whose relative error is large.
    scale = max(float(jnp.max(jnp.abs(u))) for u in expected.values())
    for name in SHAPES:
        got = updates[name].astype(jnp.float32)
        # bfloat16 has 8 significant bits: the state and the update are rounded to ~0.4%.
        np.testing.assert_allclose(got, expected[name], rtol=3e-2, atol=3e-2 * scale, err_msg=name)
    # The state's memory, as documented in `as_optax`: per matrix element 3 momenta and 1
    # second moment in bfloat16 (8 B) plus float32 row/column statistics.
    matrix = ("mom", "rms")
    nbytes = sum(getattr(state, k)["matrix"].nbytes for k in matrix)
    assert nbytes == 8 * 300 * 70
    assert state.v_row["matrix"].nbytes + state.v_col["matrix"].nbytes == 4 * 3 * (300 + 70)


def _temp_bytes_per_param(opt, params, grads):
    """Working memory of a donated training step (XLA's buffer assignment), per parameter."""
    state = opt.init(params)

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads).compile()
    n = sum(x.size for x in jax.tree.leaves(params))
    return compiled.memory_analysis().temp_size_in_bytes / n


@pytest.mark.slow
def test_working_memory_is_bounded():
    # One 2048 x 1024 matrix: the update's temporaries beyond the state are a few floats per
    # parameter plus chunk-sized buffers; before chunking they were 76 B (small_fc) and 148 B
    # (Celo2) per parameter. small_fc holds two (the update, the squared gradient for the
    # Adafactor sums): 8.2 B in all, 12.2 B while it also held a cleaned copy of the gradient.
    # Celo2 needs less than Muon's Newton-Schulz step (optax's Muon: 30 B).
    params, grads = make_problem(3, {"w": (2048, 1024)})
    small_fc = as_optax(SmallFC(key=jax.random.key(0)), num_steps=100)
    celo2 = as_optax(Celo2(key=jax.random.key(0)), num_steps=100)
    assert _temp_bytes_per_param(small_fc, params, grads) <= 10
    muon = _temp_bytes_per_param(optax.contrib.muon(1e-3), params, grads)
    assert _temp_bytes_per_param(celo2, params, grads) <= muon


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_small_fc_cleans_a_large_tensors_raw_gradient_in_its_chunks(dtype):
    # `update` streams a large tensor's raw gradient and cleans it chunk by chunk; the result is
    # bit for bit `update_preprocessed` of the cleaned gradients. NaN entries become 0 in both;
    # (an infinite one becomes the largest float, whose square overflows: no finite update to
    # compare).
    lo = SmallFC(key=jax.random.key(0), init_lr=1e-3)
    params, grads = make_problem(5, {"big": (200, 200), "vector": (20005,), "small": (5, 9)}, dtype)
    for name in ("big", "vector"):
        grads[name] = grads[name].at[0, ...].set(jnp.nan).at[-1, ...].set(jnp.nan)
    state = lo.init(params, 100)
    raw = jax.jit(lambda g, s, p: lo.update(g, s, p, chunk_size=1000), compiler_options=FAST)
    cleaned = jax.jit(
        lambda g, s, p: lo.update_preprocessed(lo.preprocess_grads(g), s, p, chunk_size=1000),
        compiler_options=FAST,
    )
    got, expected = raw(grads, state, params), cleaned(grads, state, params)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    assert all(bool(jnp.all(jnp.isfinite(u.astype(jnp.float32)))) for u in got[0].values())


def test_the_state_can_be_donated(lo):
    # A training step at scale donates the optimizer state; that needs a buffer per leaf
    # (vectors and matrices have empty Adafactor slots).
    params, grads = make_problem(4, {"w": (6, 5), "b": (5,), "s": ()})
    opt = as_optax(lo, num_steps=10)

    def step(params, state, grads):
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params, state = jax.jit(step, donate_argnums=(0, 1))(params, opt.init(params), grads)
    assert int(state.iteration) == 1
