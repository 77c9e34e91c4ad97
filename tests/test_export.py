"""Exported learned optimizers: the `.eqx` round trip and PyLO's PyTorch layout."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import elo
from elo._checkpoint import CheckpointError
from elo._export import export_pylo, load_optimizer, pylo_state_dict, save_optimizer

from .test_checkpoint import bitwise_equal


def _perturbed(lo):
    """Non-initial weights (all leaves moved), so a round trip cannot pass by re-initialising."""
    leaves = eqx.filter(lo, eqx.is_inexact_array)
    noise = jax.tree.map(lambda x: 0.01 * jr.normal(jr.key(7), x.shape), leaves)
    return eqx.apply_updates(lo, noise)


@pytest.mark.parametrize(
    "lo",
    [
        elo.SmallFC(key=jr.key(0), step_mult=2e-3, use_cosine_schedule=True, cosine_steps=77),
        elo.SmallFC(key=jr.key(1), hidden_size=8, rms_decays=(0.95,)),
        elo.Celo2(key=jr.key(2), adam_lr_mult=5.0, adam_weight_decay=0.1),
    ],
    ids=["small_fc", "small_fc_h8", "celo2"],
)
def test_eqx_roundtrip_is_bit_exact(tmp_path, lo):
    lo = _perturbed(lo)
    path = tmp_path / "lo.eqx"
    save_optimizer(path, lo)
    loaded = load_optimizer(path)
    assert type(loaded) is type(lo)
    assert bitwise_equal(loaded, lo)  # weights bitwise, static fields equal
    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    assert header["format"] == "elo-optimizer" and header["class"] == type(lo).__name__


def test_eqx_file_damage_is_refused(tmp_path):
    path = tmp_path / "lo.eqx"
    save_optimizer(path, elo.SmallFC(key=jr.key(0)))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_optimizer(path)
    with pytest.raises(CheckpointError, match="no checkpoint yet"):
        load_optimizer(tmp_path)


def _torch_linear(x, weight, bias):
    """`torch.nn.Linear` in numpy: `x @ weight.T + bias`, `weight: [out, in]`."""
    return x @ weight.T + bias


def test_pylo_small_fc_layout_reproduces_the_network(tmp_path):
    lo = _perturbed(elo.SmallFC(key=jr.key(3)))
    path = export_pylo(tmp_path / "exported", lo)
    assert path == tmp_path / "exported" / "model.safetensors"
    tensors = safetensors.numpy.load_file(path)
    assert {k: v.shape for k, v in tensors.items()} == {
        "network.input.weight": (32, 39),
        "network.input.bias": (32,),
        "network.linear_0.weight": (32, 32),
        "network.linear_0.bias": (32,),
        "network.output.weight": (2, 32),
        "network.output.bias": (2,),
    }
    np.testing.assert_array_equal(tensors["network.input.weight"], np.asarray(lo.w0).T)
    config = json.loads((tmp_path / "exported" / "config.json").read_text())
    assert config == {"input_size": 39, "hidden_size": 32, "hidden_layers": 1}
    with safetensors.safe_open(path, framework="numpy") as f:
        metadata = f.metadata()
    assert metadata["pylo_model"] == "MetaMLP" and metadata["pylo_optimizer"] == "ELO_naive"
    assert json.loads(metadata["rms_decays"]) == [0.999]
    assert json.loads(metadata["optimizer_config"])["step_mult"] == lo.step_mult

    # PyLO's MetaMLP (Linear -> ReLU -> Linear -> ReLU -> Linear) applied to small_fc's 39
    # features gives small_fc's direction and magnitude. Tolerance: float32 matmuls in a
    # different association order (the library folds part of layer 1 into a bias).
    p = jr.normal(jr.key(4), (6, 5))
    g, m, rms = jr.normal(jr.key(5), (6, 5)), jr.normal(jr.key(6), (6, 5, 3)), jnp.ones((6, 5, 1))
    fac_g = jr.normal(jr.key(8), (6, 5, 3))
    # Adafactor row/column statistics of a (6, 5) tensor: the largest axis (6) is reduced for
    # the row vector, the other for the column vector.
    v_row, v_col = 1.0 + jr.uniform(jr.key(9), (5, 3)), 1.0 + jr.uniform(jr.key(10), (6, 3))
    out = lo.tensor_outputs(
        p, g, m, rms, fac_g, v_row, v_col, jnp.zeros((0,)), iteration=jnp.int32(17)
    )
    x = np.asarray(out["features"], np.float64)
    h = np.maximum(
        _torch_linear(x, tensors["network.input.weight"], tensors["network.input.bias"]), 0
    )
    h = np.maximum(
        _torch_linear(h, tensors["network.linear_0.weight"], tensors["network.linear_0.bias"]), 0
    )
    y = _torch_linear(h, tensors["network.output.weight"], tensors["network.output.bias"])
    np.testing.assert_allclose(y[..., 0], out["direction"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y[..., 1], out["magnitude"], rtol=1e-4, atol=1e-5)


def test_pylo_celo2_layout_and_single_file(tmp_path):
    lo = elo.Celo2(key=jr.key(0))
    path = export_pylo(tmp_path / "celo2.safetensors", lo)
    assert path == tmp_path / "celo2.safetensors" and not (tmp_path / "config.json").exists()
    tensors = safetensors.numpy.load_file(path)
    assert {k: v.shape for k, v in tensors.items()} == {
        "first_layer.weight": (8, 30),
        "first_layer.bias": (8,),
        "hidden.weight": (8, 8),
        "hidden.bias": (8,),
        "output.weight": (3, 8),
        "output.bias": (3,),
    }
    np.testing.assert_array_equal(tensors["output.weight"], np.asarray(lo.w2).T)
    assert set(pylo_state_dict(lo)) == set(tensors)
