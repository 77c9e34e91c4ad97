"""Small helpers shared by the tests."""

import contextlib
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jaxtyping
import numpy as np

import elo


TINY_FIELDS = dict(
    tasks=("mlp-w32-d1_mnist-8x8x1",),
    num_particles=2,
    truncation_length=3,
    min_horizon=5,
    max_horizon=10,
    initial_step_offset=2,
    num_outer_steps=8,
)
"""The smallest meta-training run that exercises every part of the state (`pes_small_fc`)."""


TINY_ELO_FIELDS = dict(expert="adamw", supervision_start=2, supervision_end=5)
"""With `TINY_FIELDS` and 8 outer steps: imitation ($\\alpha = 0$) at steps 0-2, fused at 3-4,
the learned optimizer alone from step 5 on."""


def tiny_config(**overrides) -> elo.MetaConfig:
    """The tiny run's config (tests that share it share the compiled `meta_step`)."""
    return elo.presets.pes_small_fc(**(TINY_FIELDS | overrides))


def tiny_cli_args(**overrides) -> list[str]:
    """`elo meta-train` arguments for the tiny run (its `--steps` sets `num_outer_steps`), with
    `--set` overrides. Without validation (`--validate-every 0`), which the command makes by
    default: a later `--validate-every` overrides it."""
    args = ["--preset", "pes_small_fc", "--validate-every", "0"]
    for name, value in (TINY_FIELDS | overrides).items():
        if name != "num_outer_steps":
            text = ",".join(value) if isinstance(value, tuple) else str(value)
            args += ["--set", f"{name}={text}"]
    return args


def bitwise_equal(a, b) -> bool:
    """Same structure, same static parts, and every array leaf identical bit for bit (dtype and
    shape included)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, jax.Array | np.ndarray) or isinstance(y, jax.Array | np.ndarray):
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
                return False
        elif x != y:
            return False
    return True


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


def perturbed(lo):
    """Non-initial weights (all leaves moved), so a round trip cannot pass by re-initialising."""
    leaves = eqx.filter(lo, eqx.is_inexact_array)
    noise = jax.tree.map(lambda x: 0.01 * jr.normal(jr.key(7), x.shape), leaves)
    return eqx.apply_updates(lo, noise)


def regression_data(n=120, features=2, seed=0):
    """A small regression problem, y = sin(sum of x), split half / quarter / quarter."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    a, b = n // 2, 3 * n // 4
    return {
        "train": {"x": x[:a], "y": y[:a]},
        "validation": {"x": x[a:b], "y": y[a:b]},
        "test": {"x": x[b:], "y": y[b:]},
    }


def mse(model, batch):
    """The mean squared error of `model` on a batch of `regression_data`."""
    return jnp.mean((jax.vmap(model)(batch["x"]) - batch["y"]) ** 2)


def mlp(key, features=2, width=8):
    """A one-hidden-layer MLP for `regression_data`."""
    return eqx.nn.MLP(features, 1, width, 1, key=key)


def make_task(width=8, name="sine", **kwargs):
    """A task on `regression_data`; `max_loss` is given (measuring it compiles a program)."""
    data = kwargs.pop("data", None) or regression_data()
    features = data["train"]["x"].shape[1]
    model = (
        mlp
        if (features, width) == (2, 8)
        else functools.partial(mlp, features=features, width=width)
    )
    kwargs.setdefault("max_loss", 3.0)
    return elo.tasks.ModelTask(model, mse, data, batch_size=16, name=name, **kwargs)
