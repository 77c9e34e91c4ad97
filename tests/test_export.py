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
from elo._export import export_pylo, load_optimizer, pylo_state_dict, save_optimizer
from elo._io import CheckpointError
from elo.optimizers._accumulators import accumulate

from .helpers import bitwise_equal


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


def _network_view(lo, shape, seed):
    """`lo.tensor_outputs` for one tensor of `shape` whose accumulators have seen three random
    gradients (of scales 1e-3, 1 and 1e2), so the features are those of a run."""
    keys = jr.split(jr.key(seed), 4)
    p = jr.normal(keys[0], shape)
    state = lo.init({"p": p}, num_steps=100)
    decays = {
        "momentum_decays": lo.momentum_decays,
        "rms_decays": lo.rms_decays,
        "adafactor_decays": lo.adafactor_decays,
    }
    for key, scale in zip(keys[1:], (1e-3, 1.0, 1e2)):
        g = scale * jr.normal(key, shape)
        state, fac_g = accumulate(state, {"p": g}, **decays)
    args = (p, g, state.mom["p"], state.rms["p"], fac_g["p"])
    args = args + (state.v_row["p"], state.v_col["p"], state.v_diag["p"])
    if isinstance(lo, elo.SmallFC):
        return lo.tensor_outputs(*args, iteration=jnp.int32(17))
    return lo.tensor_outputs(*args)


def _metadata(path):
    with safetensors.safe_open(path, framework="numpy") as f:
        return f.metadata()


# Shapes of the optimizee tensors whose features are fed to the exported networks: a matrix, a
# vector (small_fc's diagonal features, Celo2's 9 input groups) and a conv kernel.
_SHAPES = [(6, 5), (7,), (3, 3, 4, 6)]

# Float32 tolerance of network outputs computed by different code (PyTorch or numpy versus
# `elo`'s blocked, bias-folded MLP): the same products summed in another order. The outputs are
# of order 1 and the differences measured were at most 2.4e-7; a wrong layout (e.g. two input
# groups of Celo2 swapped) is off by about 0.1.
_RTOL, _ATOL = 1e-5, 2e-6


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
    metadata = _metadata(path)
    assert metadata["pylo_model"] == "MetaMLP" and metadata["pylo_optimizer"] == "ELO_naive"
    assert json.loads(metadata["model_config"]) == config
    assert json.loads(metadata["rms_decays"]) == [0.999]
    # Exactly the keyword arguments of PyLO's `ELO_naive` (it has no schedule of its own).
    assert json.loads(metadata["optimizer_config"]) == {
        "lr": lo.step_mult,
        "exp_mult": lo.exp_mult,
        "weight_decay": lo.weight_decay,
        "hidden_size": 32,
        "hidden_layers": 1,
        "initial_momentum_decays": [0.9, 0.99, 0.999],
        "initial_rms_decays": [0.999],
        "initial_adafactor_decays": [0.9, 0.99, 0.999],
        "clip_grad": False,
        "clip_norm": 1.0,
    }
    assert json.loads(metadata["elo_hyperparameters"])["warmup_fraction"] == lo.warmup_fraction

    # PyLO's MetaMLP (Linear -> ReLU -> Linear -> ReLU -> Linear) applied to small_fc's 39
    # features gives small_fc's direction and magnitude.
    for shape in _SHAPES:
        out = _network_view(lo, shape, seed=4)
        x = np.asarray(out["features"])
        h = _torch_linear(x, tensors["network.input.weight"], tensors["network.input.bias"])
        h = np.maximum(h, 0)
        h = _torch_linear(h, tensors["network.linear_0.weight"], tensors["network.linear_0.bias"])
        h = np.maximum(h, 0)
        y = _torch_linear(h, tensors["network.output.weight"], tensors["network.output.bias"])
        np.testing.assert_allclose(y[..., 0], out["direction"], rtol=_RTOL, atol=_ATOL)
        np.testing.assert_allclose(y[..., 1], out["magnitude"], rtol=_RTOL, atol=_ATOL)


_CELO2_GROUPS = (1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3)


def test_pylo_celo2_layout_reproduces_the_network(tmp_path):
    lo = _perturbed(elo.Celo2(key=jr.key(0), adam_lr_mult=5.0, peak_lr=3e-4, end_lr=3e-5))
    path = export_pylo(tmp_path / "celo2.safetensors", lo)
    assert path == tmp_path / "celo2.safetensors" and not (tmp_path / "config.json").exists()
    tensors = safetensors.numpy.load_file(path)
    assert {k: v.shape for k, v in tensors.items()} == {
        **{f"w0.{k}": (width, 8) for k, width in enumerate(_CELO2_GROUPS)},
        "b0": (8,),
        "dense_w.0": (8, 8),
        "dense_b.0": (8,),
        "dense_w.1": (8, 3),
        "dense_b.1": (3,),
    }
    np.testing.assert_array_equal(tensors["w0.3"], np.asarray(lo.w0)[3:6])
    np.testing.assert_array_equal(tensors["w0.13"], np.asarray(lo.w0)[27:])
    np.testing.assert_array_equal(tensors["dense_w.1"], np.asarray(lo.w2))
    assert set(pylo_state_dict(lo)) == set(tensors)
    metadata = _metadata(path)
    assert metadata["pylo_model"] == "CELO2MLP"
    assert metadata["pylo_optimizer"] == "ELO_CELO2_naive"
    assert json.loads(metadata["model_config"]) == {
        "feature_dims": list(_CELO2_GROUPS),
        "hidden_size": 8,
        "hidden_layers": 2,
        "output_size": 3,
        "activation": "relu",
    }
    config = json.loads(metadata["optimizer_config"])
    assert config["lr"] == 3e-4 and config["adam_lr_mult"] == 5.0
    assert config["initial_rms_decays"] == [0.95] and config["ff_hidden_size"] == 8
    assert config["grad_clip_val"] == float(np.finfo(np.float32).max)
    assert json.loads(metadata["elo_hyperparameters"])["end_lr"] == 3e-5

    # PyLO's CELO2MLP.forward: the sum over input groups of `x_k @ w0.k`, then dense layers.
    for shape in _SHAPES:
        out = _network_view(lo, shape, seed=5)
        x = np.asarray(out["features"])
        bounds = np.cumsum((0,) + _CELO2_GROUPS)
        groups = [x[..., bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1)]
        groups = [xk for xk in groups if xk.shape[-1] > 0]  # 9 groups for a vector
        h = sum(xk @ tensors[f"w0.{k}"] for k, xk in enumerate(groups)) + tensors["b0"]
        h = np.maximum(h, 0) @ tensors["dense_w.0"] + tensors["dense_b.0"]
        y = np.maximum(h, 0) @ tensors["dense_w.1"] + tensors["dense_b.1"]
        np.testing.assert_allclose(y[..., 0], out["direction"], rtol=_RTOL, atol=_ATOL)


@pytest.mark.parametrize(
    "lo",
    [
        elo.SmallFC(key=jr.key(1)),
        elo.SmallFC(key=jr.key(2), hidden_size=8, rms_decays=(0.95,)),
        elo.Celo2(key=jr.key(3)),
        elo.Celo2(key=jr.key(4), hidden_size=4),
    ],
    ids=["small_fc", "small_fc_h8", "celo2", "celo2_h4"],
)
def test_pylo_modules_load_the_export_and_match_elo(tmp_path, lo):
    """PyLO's own modules (copied in `tests/pylo_modules.py`) load the file with
    `strict=True`, and map `elo`'s features to `elo`'s network outputs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    import safetensors.torch

    from .pylo_modules import CELO2_FEATURE_DIMS, CELO2MLP, MetaMLP

    lo = _perturbed(lo)
    path = export_pylo(tmp_path / "exported", lo)
    metadata = _metadata(path)
    cls = {"MetaMLP": MetaMLP, "CELO2MLP": CELO2MLP}[metadata["pylo_model"]]
    net = cls(**json.loads(metadata["model_config"]))
    net.load_state_dict(safetensors.torch.load_file(path), strict=True)
    # The Hugging Face directory layout: config.json gives the constructor arguments.
    hub = cls.from_pretrained(str(tmp_path / "exported"), strict=True)
    weights = lo.export_weights()
    for shape in _SHAPES:
        out = _network_view(lo, shape, seed=6)
        x = np.array(out["features"])  # a writable copy, for torch.from_numpy
        inputs = torch.from_numpy(x)
        if cls is CELO2MLP:
            widths = [w for w in np.cumsum(CELO2_FEATURE_DIMS) if w <= x.shape[-1]]
            inputs = list(torch.split(inputs, np.diff([0] + widths).tolist(), dim=-1))
        with torch.no_grad():
            y, y_hub = net(inputs).numpy(), hub(inputs).numpy()
        np.testing.assert_array_equal(y_hub, y)
        assert y.dtype == np.float32 and y.shape == shape + (weights["b2"].shape[0],)
        np.testing.assert_allclose(y[..., 0], out["direction"], rtol=_RTOL, atol=_ATOL)
        if isinstance(lo, elo.SmallFC):
            np.testing.assert_allclose(y[..., 1], out["magnitude"], rtol=_RTOL, atol=_ATOL)
        # Every output channel (Celo2's unused two included) against the neutral layout's
        # formula, relu(relu(x w0 + b0) w1 + b1) w2 + b2, in float64.
        w64 = {k: np.asarray(v, np.float64) for k, v in weights.items()}
        h = np.maximum(x.astype(np.float64) @ w64["w0"][: x.shape[-1]] + w64["b0"], 0)
        h = np.maximum(h @ w64["w1"] + w64["b1"], 0)
        np.testing.assert_allclose(y, h @ w64["w2"] + w64["b2"], rtol=_RTOL, atol=_ATOL)
