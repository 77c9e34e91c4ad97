"""Shared jaxtyping aliases used across `elo`."""

from typing import Any, TypeAlias

from jaxtyping import Array, ArrayLike, Bool, Float, Int, PRNGKeyArray, PyTree


Scalar: TypeAlias = Float[Array, ""]
ScalarLike: TypeAlias = float | Float[ArrayLike, ""]
IntScalar: TypeAlias = Int[Array, ""]
BoolScalar: TypeAlias = Bool[Array, ""]
Params: TypeAlias = PyTree[Float[Array, "..."]]
Updates: TypeAlias = PyTree[Float[Array, "..."]]

__all__ = [
    "Any",
    "Array",
    "BoolScalar",
    "IntScalar",
    "Params",
    "PRNGKeyArray",
    "PyTree",
    "Scalar",
    "ScalarLike",
    "Updates",
]
