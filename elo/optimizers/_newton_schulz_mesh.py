"""Newton–Schulz of many matrices spread over a device mesh: each matrix orthogonalised on one
device, instead of every device orthogonalising every matrix."""

from collections.abc import Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from jaxtyping import Array

from ._chunked import explicit_sharding
from ._newton_schulz import newton_schulz


def _mesh_of(x: Array):
    """The (abstract) mesh `x` is laid out on, if it has more than one device."""
    sharding = jax.typeof(x).sharding
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    mesh = sharding.mesh
    if mesh.size == 1:
        return None
    kinds = set(mesh.axis_types)
    if kinds != {AxisType.Explicit} and kinds != {AxisType.Auto}:
        return None  # a mixed mesh: no single way to move the stack
    return mesh


def _gathered(x: Array, form: Literal["celo2", "elo"]) -> Array:
    """Newton–Schulz of one matrix (or stack) as a whole: under an `Explicit` mesh a sharded
    input is gathered for it and the result sharded like the input again."""
    sharding = explicit_sharding(x)
    if sharding is None:
        return newton_schulz(x, form=form)
    whole = jax.sharding.reshard(x, NamedSharding(sharding.mesh, P()))
    return jax.sharding.reshard(newton_schulz(whole, form=form), sharding)


def newton_schulz_many(
    matrices: Sequence[Array], *, form: Literal["celo2", "elo"] = "celo2"
) -> list[Array]:
    """[`newton_schulz`][elo.optimizers.newton_schulz] of every array in `matrices`, spread
    over the devices of their mesh.

    Without a mesh (one device) each matrix is orthogonalised as it is. On a mesh of $D$
    devices, the matrices of one shape, dtype and sharding are stacked into a batch whose
    leading axis is split over all $D$ devices (one all-to-all, or a local slice for replicated
    matrices), each device orthogonalises its $\\lceil K/D\\rceil$ of the $K$ matrices, and the
    results go back to the matrices' own sharding (one all-to-all, or an all-gather for
    replicated matrices). The work per device falls as $1/D$ instead of staying that of all
    $K$ matrices. Under an `Explicit` mesh the layouts are exact (`jax.sharding.reshard`);
    under an `Auto` mesh they are constraints for the compiler, and the results are left for
    it to place. Arrays of rank other than 2 (conv kernels) are orthogonalised whole, as
    before. The results equal those of one device up to float32 round-off (batched and
    single matrix products sum in different orders).

    **Arguments:**

    - `matrices`: the arrays to orthogonalise (their last two axes).
    - `form`: see [`elo.optimizers.newton_schulz`][].

    **Returns:**

    The orthogonalised arrays, in the order given, each sharded like its input.
    """
    out: list[Array | None] = [None] * len(matrices)
    groups: dict[tuple, list[int]] = {}
    for i, x in enumerate(matrices):
        mesh = _mesh_of(x)
        if mesh is None or x.ndim != 2:
            out[i] = _gathered(x, form)
        else:
            spec = tuple(jax.typeof(x).sharding.spec)
            spec = spec + (None,) * (2 - len(spec))
            groups.setdefault((x.shape, x.dtype, mesh, spec), []).append(i)
    for (_, _, mesh, spec), members in groups.items():
        stacked = jnp.stack([matrices[i] for i in members])
        padding = -len(members) % mesh.size
        if padding:
            stacked = jnp.pad(stacked, ((0, padding), (0, 0), (0, 0)))
        spread = NamedSharding(mesh, P(tuple(mesh.axis_names), None, None))
        if AxisType.Explicit in mesh.axis_types:
            stacked = jax.sharding.reshard(stacked, spread)
        else:
            stacked = jax.lax.with_sharding_constraint(stacked, spread)
        if form == "celo2":
            done = newton_schulz(stacked, form=form)
        else:
            done = jax.vmap(lambda m: newton_schulz(m, form=form))(stacked)
        if AxisType.Explicit in mesh.axis_types:
            done = jax.sharding.reshard(done, NamedSharding(mesh, P(None, *spec)))
        for k, i in enumerate(members):
            out[i] = done[k]
    results = [x for x in out if x is not None]
    assert len(results) == len(matrices)
    return results
