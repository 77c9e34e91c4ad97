"""Properties of the quintic Newton–Schulz iteration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from elo.optimizers import newton_schulz


A, B, C = 3.4445, -4.7750, 2.0315


def quintic5(s):
    """The scalar map that NS5 applies to each singular value of X / ||X||_F (float64)."""
    for _ in range(5):
        s = A * s + B * s**3 + C * s**5
    return s


def random_svd(seed, rows, cols, low, scale):
    """A float32 matrix U diag(s) V^T with known factors and singular values in [low, 1]*scale."""
    rng = np.random.default_rng(seed)
    k = min(rows, cols)
    u, _ = np.linalg.qr(rng.normal(size=(rows, k)))
    v, _ = np.linalg.qr(rng.normal(size=(cols, k)))
    s = rng.uniform(low, 1.0, size=k)
    return (u * (s * scale)) @ v.T, u, s, v


shapes = st.sampled_from([(3, 7), (7, 3), (5, 5)])


@settings(deadline=None, max_examples=12)
@given(
    shape=shapes,
    seed=st.integers(0, 2**31 - 1),
    log_scale=st.integers(-3, 3),
    form=st.sampled_from(["celo2", "elo"]),
)
def test_singular_values_and_orientation(shape, seed, log_scale, form):
    x, u, s, v = random_svd(seed, *shape, low=0.2, scale=10.0**log_scale)
    out = np.asarray(newton_schulz(jnp.asarray(x, jnp.float32), form=form), np.float64)
    assert out.shape == shape
    # NS5 keeps the singular vectors and maps each normalised singular value through the quintic:
    # out = U diag(f^5(s/||s||)) V^T. So U^T out V is diagonal with known entries.
    core = u.T @ out @ v
    expected = quintic5(s / np.linalg.norm(s))
    # float32 matmuls on unit-scale matrices: ~1e-6 per step, amplified by at most ~5 over 5 steps.
    np.testing.assert_allclose(core, np.diag(expected), atol=2e-4)
    # s/||s|| >= 0.2/sqrt(8) > 1e-2, where f^5 lies in [0.68, 1.14]: the iteration does not
    # converge to 1, it oscillates in that band.
    sv = np.linalg.svd(out, compute_uv=False)
    assert np.all(sv > 0.68 - 1e-3) and np.all(sv < 1.14 + 1e-3), sv


def test_quintic_range():
    # The band quoted in the docstring, for normalised singular values in [1e-2, 1].
    s = np.linspace(1e-2, 1.0, 100_001)
    f = quintic5(s)
    assert 0.68 < f.min() < 0.69 and 1.13 < f.max() < 1.14
    assert quintic5(np.linspace(1e-6, 1.0, 1_000_001)).max() < 1.21


@pytest.mark.parametrize("form", ["celo2", "elo"])
def test_transpose_equivariance(form):
    x = jnp.asarray(np.random.default_rng(0).normal(size=(5, 9)), jnp.float32)
    np.testing.assert_allclose(
        newton_schulz(x.T, form=form), newton_schulz(x, form=form).T, rtol=0, atol=1e-6
    )


@pytest.mark.slow
def test_forms_agree_and_batching():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 3, 4, 6)), jnp.float32)
    batched = newton_schulz(x)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(batched[i, j], newton_schulz(x[i, j]), atol=1e-6)
            np.testing.assert_allclose(batched[i, j], newton_schulz(x[i, j], form="elo"), atol=1e-5)


@pytest.mark.parametrize("form", ["celo2", "elo"])
def test_zero_matrix(form):
    out = newton_schulz(jnp.zeros((4, 7)), form=form)
    assert np.array_equal(np.asarray(out), np.zeros((4, 7)))


def test_bad_input():
    # Under the test suite's runtime type checking a wrong rank or form is a TypeError already.
    with pytest.raises((ValueError, TypeError)):
        newton_schulz(jnp.ones(3))
    with pytest.raises(ValueError, match="2-D only"):
        newton_schulz(jnp.ones((2, 3, 4)), form="elo")
    with pytest.raises((ValueError, TypeError)):
        newton_schulz(jnp.ones((3, 3)), form="other")  # pyright: ignore


@pytest.mark.slow
def test_jit_vmap():
    x = jnp.asarray(np.random.default_rng(2).normal(size=(4, 5, 3)), jnp.float32)
    out = jax.jit(jax.vmap(newton_schulz))(x)
    np.testing.assert_allclose(out, newton_schulz(x), atol=1e-6)
