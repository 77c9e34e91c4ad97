"""Newton–Schulz over a device mesh (`newton_schulz_many`): the same results as one device, each
matrix orthogonalised on one device, few collectives, on `Auto` and `Explicit` meshes of 4
virtual CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from elo.internal import hlo_collectives
from elo.optimizers import newton_schulz, newton_schulz_many


def _flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"])


def _matrices(count, shape, seed=0):
    keys = jax.random.split(jax.random.key(seed), count)
    return [jax.random.normal(k, shape) for k in keys]


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=str)
@pytest.mark.parametrize("form", ["celo2", "elo"])
def test_eight_row_sharded_matrices_on_four_devices(axis_type, form):
    """8 row-sharded [256, 256] matrices: each device does a quarter of one device's work (at
    most 0.4x, the issue's bar), with at most 3 collectives per matrix, and the results equal
    one device's to float32 round-off."""
    mesh = jax.make_mesh((4,), ("d",), axis_types=(axis_type,))
    plain = _matrices(8, (256, 256))
    sharded = [jax.device_put(x, NamedSharding(mesh, P("d", None))) for x in plain]
    run = jax.jit(lambda xs: newton_schulz_many(xs, form=form))
    compiled = run.lower(sharded).compile()
    single = jax.jit(lambda xs: [newton_schulz(x, form=form) for x in xs]).lower(plain).compile()
    assert _flops(compiled) <= 0.4 * _flops(single)
    found = hlo_collectives(compiled.as_text())
    moved = ("all-gather", "all-to-all", "collective-permute")
    assert sum(len(found[name]) for name in moved) <= 3 * 8
    got = compiled(sharded)
    want = single(plain)
    for g, w in zip(got, want):
        # Batched and single matrix products sum in other orders: float32 round-off of unit-
        # scale entries after 5 iterations (measured differences below 1e-5).
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)
    if axis_type == AxisType.Explicit:
        for g in got:
            assert g.sharding.is_equivalent_to(NamedSharding(mesh, P("d", None)), 2)


def test_replicated_matrices_are_split_then_gathered():
    """Replicated matrices on an Explicit mesh: every device used to orthogonalise all of them;
    now each does its share and the results are gathered (still replicated)."""
    mesh = jax.make_mesh((4,), ("d",), axis_types=(AxisType.Explicit,))
    plain = _matrices(4, (64, 96), seed=1)
    replicated = [jax.device_put(x, NamedSharding(mesh, P())) for x in plain]
    compiled = jax.jit(newton_schulz_many).lower(replicated).compile()
    single = jax.jit(lambda xs: [newton_schulz(x) for x in xs]).lower(plain).compile()
    assert _flops(compiled) <= 0.4 * _flops(single)
    for g, w in zip(compiled(replicated), single(plain)):
        assert g.sharding.is_fully_replicated
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


def test_one_device_is_unchanged_bit_for_bit():
    plain = _matrices(3, (16, 24), seed=2) + [jax.random.normal(jax.random.key(3), (3, 8, 5))]
    got = jax.jit(newton_schulz_many)(plain)
    for g, x in zip(got, plain):
        assert jnp.array_equal(g, jax.jit(newton_schulz)(x))
