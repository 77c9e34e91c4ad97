"""A learned optimizer used through plain optax code."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from elo.optimizers import as_optax, Celo2, SmallFC


# Compile quickly: these tests are dominated by XLA compile time, not by run time.
FAST = {"xla_backend_optimization_level": 0}


def probe_weights(lo, row):
    """Weights that make the MLP's direction output equal to input feature `row`.

    With `w0[row] = (1, -1)`, `w1` = identity on the first two units and `w2[:, 0] = (1, -1)`,
    the network computes `relu(f) - relu(-f) = f` (the parity suite's "probe weights").
    """
    w = {k: np.zeros_like(v) for k, v in lo.export_weights().items()}
    w["w0"][row, 0], w["w0"][row, 1] = 1.0, -1.0
    w["w1"][0, 0] = w["w1"][1, 1] = 1.0
    w["w2"][0, 0], w["w2"][1, 0] = 1.0, -1.0
    return w


def hand_designed(cls):
    """A stand-in for a trained optimizer: small_fc that steps along the RMS-normalised Adam
    direction m/sqrt(v) (feature row 6), or Celo2 that orthogonalises the momentum m (row 3),
    i.e. Muon."""
    if cls is SmallFC:
        lo = SmallFC(key=jax.random.key(0), step_mult=3e-2, warmup_fraction=0.0)
        return lo.load_weights(probe_weights(lo, 6))
    lo = Celo2(key=jax.random.key(0), init_lr=3e-2, peak_lr=3e-2, end_lr=3e-2, adam_lr_mult=1.0)
    return lo.load_weights(probe_weights(lo, 3))


def mlp_problem():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k1, (128, 8))
    y = jnp.sin(x @ jax.random.normal(k2, (8, 1)))
    ka, kb = jax.random.split(k3)
    params = {
        "hidden": {"w": jax.random.normal(ka, (8, 32)) / jnp.sqrt(8.0), "b": jnp.zeros(32)},
        "out": {"w": jax.random.normal(kb, (32, 1)) / jnp.sqrt(32.0), "b": jnp.zeros(1)},
    }

    def loss(params):
        h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"][None])
        return jnp.mean((h @ params["out"]["w"] + params["out"]["b"][None] - y) ** 2)

    return params, loss


@pytest.mark.parametrize("cls", [SmallFC, Celo2], ids=lambda c: c.__name__)
def test_trains_an_mlp_with_plain_optax_code(cls):
    params, loss = mlp_problem()
    num_steps = 60
    opt = as_optax(hand_designed(cls), num_steps=num_steps)
    assert isinstance(opt, optax.GradientTransformationExtraArgs)
    opt_state = opt.init(params)

    @jax.jit
    def train(params, opt_state):
        def step(carry, _):
            params, opt_state = carry
            value, grads = jax.value_and_grad(loss)(params)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value

        return jax.lax.scan(step, (params, opt_state), length=num_steps)

    train = jax.jit(train.__wrapped__, compiler_options=FAST)
    (params, opt_state), losses = train(params, opt_state)
    losses = np.asarray(losses)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    assert int(opt_state.iteration) == num_steps


def test_chains_with_other_transformations():
    params, loss = mlp_problem()
    opt = optax.chain(optax.clip_by_global_norm(1.0), as_optax(hand_designed(SmallFC), num_steps=5))
    state = opt.init(params)
    grads = jax.grad(loss)(params)
    updates, state = jax.jit(opt.update, compiler_options=FAST)(grads, state, params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)


def test_clear_errors():
    lo = SmallFC(key=jax.random.key(0))
    params = {"w": jnp.ones((3, 4))}
    with pytest.raises(TypeError, match="num_steps"):
        as_optax(lo)
    with pytest.raises(TypeError):
        as_optax(optax.adam(1e-3), num_steps=10)  # pyright: ignore
    opt = as_optax(lo, num_steps=10)
    state = opt.init(params)
    with pytest.raises(ValueError, match="params"):
        opt.update(params, state)
    with pytest.raises(ValueError, match="tree structure"):
        other = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
        opt.update(other, state, other)
    # (Under the test suite's runtime type checking the annotations catch these first.)
    with pytest.raises(TypeError):
        opt.init({"w": jnp.ones((3, 4), jnp.int32)})
    with pytest.raises(TypeError):
        opt.update({"w": jnp.ones((3, 4), jnp.int32)}, state, params)
