"""Small helpers shared by the tests."""

import contextlib

import equinox as eqx
import jaxtyping


def tree_allclose(x, y, *, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Whether two pytrees have the same structure and numerically close leaves."""
    return bool(eqx.tree_equal(x, y, typematch=True, rtol=rtol, atol=atol))


@contextlib.contextmanager
def without_runtime_type_checks():
    """Turn off the test suite's jaxtyping/beartype checks for a block.

    For tests of what users see when they pass a wrong value (users do not run the type
    checker): with it on, a `Literal`-typed field rejects a bad choice with a TypeCheckError
    before the library's own ValueError, which names the field and the allowed values.
    """
    previous = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", previous)
