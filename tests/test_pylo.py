"""PyLO's PyTorch layout: `elo.export_pylo`, `elo.pylo_state_dict`, `elo.import_pylo` and
`elo.pretrained` of Hub names and local directories."""

import json
import sys
import threading
import time

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import elo
from elo._files._framing import CheckpointError
from elo._files._pylo import export_pylo, import_pylo, pylo_state_dict

from .helpers import bitwise_equal, perturbed, without_runtime_type_checks


@eqx.filter_jit  # one program per shape: op by op, each of its operations would compile
def _network_view(lo, shape, seed):
    """`lo.tensor_outputs` for one tensor of `shape` whose accumulators have seen three random
    gradients (of scales 1e-3, 1 and 1e2), so the features are those of a run."""
    keys = jr.split(jr.key(seed), 4)
    p = jr.normal(keys[0], shape)
    state = lo.init({"p": p}, num_steps=100)
    for key, scale in zip(keys[1:], (1e-3, 1.0, 1e2)):
        g = scale * jr.normal(key, shape)
        state, fac_g = lo.accumulate(state, {"p": g})
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


@pytest.mark.slow
def test_pylo_small_fc_layout_reproduces_the_network(tmp_path):
    lo = perturbed(elo.SmallFC(key=jr.key(3)))
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


@pytest.mark.slow
def test_pylo_celo2_layout_reproduces_the_network(tmp_path):
    lo = perturbed(elo.Celo2(key=jr.key(0), adam_lr_mult=5.0, peak_lr=3e-4, end_lr=3e-5))
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


# Built when a test runs, not when the module is collected (every test process collects it).
_DEFAULT_OPTIMIZERS = {
    "small_fc": lambda: elo.SmallFC(key=jr.key(1)),
    "small_fc_h8": lambda: elo.SmallFC(key=jr.key(2), hidden_size=8, rms_decays=(0.95,)),
    "celo2": lambda: elo.Celo2(key=jr.key(3)),
    "celo2_h4": lambda: elo.Celo2(key=jr.key(4), hidden_size=4),
}


@pytest.mark.parametrize("name", list(_DEFAULT_OPTIMIZERS))
def test_pylo_modules_load_the_export_and_match_elo(tmp_path, name):
    """PyLO's own modules (copied in `tests/pylo_modules.py`) load the file with
    `strict=True`, and map `elo`'s features to `elo`'s network outputs."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")
    lo = _DEFAULT_OPTIMIZERS[name]()
    import safetensors.torch

    from .pylo_modules import CELO2_FEATURE_DIMS, CELO2MLP, MetaMLP

    lo = perturbed(lo)
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


# ------------------------------------------------------------------------------------------------
# Import: export -> import, PyLO-written files, hyperparameters, bad input.


# Built when a test runs, not when the module is collected (every test process collects it).
_OPTIMIZERS = {
    "small_fc": lambda: elo.SmallFC(
        key=jr.key(0), step_mult=2e-3, use_cosine_schedule=True, cosine_steps=77
    ),
    "small_fc_h8": lambda: elo.SmallFC(
        key=jr.key(1), hidden_size=8, rms_decays=(0.95,), weight_decay=0.01
    ),
    "celo2": lambda: elo.Celo2(
        key=jr.key(2), adam_lr_mult=5.0, adam_weight_decay=0.1, peak_lr=3e-4
    ),
    "celo2_h4": lambda: elo.Celo2(
        key=jr.key(3), hidden_size=4, warmup_fraction=0.05, orthogonalize=False
    ),
}


@pytest.mark.parametrize("name", list(_OPTIMIZERS))
def test_export_then_import_is_bit_exact(tmp_path, name):
    lo = perturbed(_OPTIMIZERS[name]())
    directory = tmp_path / "hub"
    export_pylo(directory, lo)
    file = export_pylo(tmp_path / "lo.safetensors", lo)
    for source in (directory, file, str(file)):
        back = import_pylo(source)
        assert type(back) is type(lo) and bitwise_equal(back, lo)
    # A bare state dict has no hyperparameters: the weights still come back bit for bit.
    back = import_pylo(pylo_state_dict(lo))
    weights = lo.export_weights()
    assert all(np.array_equal(back.export_weights()[k], weights[k]) for k in weights)


def _updates(lo, steps=3):
    """The updates of `elo.as_optax(lo)` over a few steps on a matrix, a vector and a conv
    kernel with random gradients."""
    params = {"w": jnp.ones((6, 5)), "b": jnp.zeros(5), "k": jnp.ones((3, 3, 2, 4))}
    opt = elo.as_optax(lo, num_steps=100)
    state = opt.init(params)
    out = []
    for i in range(steps):
        keys = jr.split(jr.key(10 + i), 3)
        grads = {k: jr.normal(key, v.shape) for key, (k, v) in zip(keys, params.items())}
        updates, state = opt.update(grads, state, params)
        params = eqx.apply_updates(params, updates)
        out.append(updates)
    return out


def _write_like_pylo(directory, lo):
    """The files PyLO's `save_pretrained` (PyTorchModelHubMixin) writes: the module's
    `state_dict` in safetensors with only `{"format": "pt"}` as metadata, and `config.json`
    with the constructor arguments; no `elo` metadata at all."""
    directory.mkdir()
    tensors = pylo_state_dict(lo)
    safetensors.numpy.save_file(tensors, directory / "model.safetensors", {"format": "pt"})
    hidden = int(lo.b0.shape[0])
    if isinstance(lo, elo.SmallFC):
        config = {"input_size": 39, "hidden_size": hidden, "hidden_layers": 1}
    else:
        config = {
            "feature_dims": list(_CELO2_GROUPS),
            "hidden_size": hidden,
            "hidden_layers": 2,
            "output_size": 3,
            "activation": "relu",
        }
    (directory / "config.json").write_text(json.dumps(config))


@pytest.mark.slow
@pytest.mark.parametrize(
    "make, pylo_defaults, elo_defaults",
    [
        # ELO_naive's defaults are SmallFC's.
        (lambda: elo.SmallFC(key=jr.key(4)), {}, None),
        # ELO_CELO2_naive runs with weight decay 0.1 and AdamW at 1x the rate; Celo2's own
        # defaults (no decay, 20x) give other updates.
        (lambda: elo.Celo2(key=jr.key(5)), {"weight_decay": 0.1, "adam_lr_mult": 1.0}, {}),
    ],
    ids=["small_fc", "celo2"],
)
def test_a_file_written_as_pylo_does_gives_the_same_updates(
    tmp_path, make, pylo_defaults, elo_defaults
):
    lo = perturbed(make())  # built when the test runs, not when the module is collected
    _write_like_pylo(tmp_path / "repo", lo)
    imported = import_pylo(tmp_path / "repo")
    expected = type(lo)(weights=lo.export_weights(), **pylo_defaults)
    assert bitwise_equal(imported, expected)
    for got, want in zip(_updates(imported), _updates(expected), strict=True):
        assert bitwise_equal(got, want)
    if elo_defaults is not None:
        other = _updates(type(lo)(weights=lo.export_weights(), **elo_defaults))
        assert not np.allclose(other[-1]["b"], _updates(imported)[-1]["b"])


def test_a_file_written_by_pylos_torch_modules_gives_the_same_updates(tmp_path):
    """PyLO's own modules (tests/pylo_modules.py), randomly initialised by torch and saved with
    `save_pretrained`, import as optimizers whose network is the torch module's."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("huggingface_hub")

    from .pylo_modules import CELO2MLP, MetaMLP

    torch.manual_seed(0)
    for net in (MetaMLP(input_size=39, hidden_size=16, hidden_layers=1), CELO2MLP(hidden_size=4)):
        directory = tmp_path / type(net).__name__
        net.save_pretrained(str(directory))
        lo = import_pylo(directory)
        state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
        assert bitwise_equal(lo, import_pylo(state))
        for shape in _SHAPES:
            out = _network_view(lo, shape, seed=8)
            x = np.array(out["features"])
            inputs = torch.from_numpy(x)
            if isinstance(net, CELO2MLP):
                widths = [w for w in np.cumsum(_CELO2_GROUPS) if w <= x.shape[-1]]
                inputs = list(torch.split(inputs, np.diff([0] + widths).tolist(), dim=-1))
            with torch.no_grad():
                y = net(inputs).numpy()
            np.testing.assert_allclose(y[..., 0], out["direction"], rtol=_RTOL, atol=_ATOL)


def test_hyperparameters_from_pylo_config_and_keywords(tmp_path):
    lo = perturbed(elo.SmallFC(key=jr.key(6), step_mult=2e-3))
    export_pylo(tmp_path / "a", lo)
    assert import_pylo(tmp_path / "a").step_mult == 2e-3
    assert import_pylo(tmp_path / "a", optimizer_config={"lr": 3e-4}).step_mult == 3e-4
    back = import_pylo(tmp_path / "a", step_mult=5e-4, warmup_fraction=0.0)
    assert (back.step_mult, back.warmup_fraction) == (5e-4, 0.0)
    celo2 = import_pylo(pylo_state_dict(elo.Celo2(key=jr.key(7))), optimizer_config={"lr": 2e-4})
    assert isinstance(celo2, elo.Celo2)
    assert (celo2.init_lr, celo2.peak_lr, celo2.end_lr) == (2e-4, 2e-4, 2e-4)
    assert (celo2.weight_decay, celo2.adam_lr_mult, celo2.clip_grad) == (0.1, 1.0, True)
    assert celo2.rms_decays == (0.95,)


def _one_line_error(error_type, match, fn, *args, **kwargs):
    with pytest.raises(error_type, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value), str(info.value)


def test_files_of_another_layout_name_the_keys(tmp_path):
    tensors = pylo_state_dict(elo.SmallFC(key=jr.key(0)))
    tensors["network.linear_1.weight"] = tensors["network.linear_0.weight"]
    del tensors["network.output.bias"]
    path = tmp_path / "deeper.safetensors"
    safetensors.numpy.save_file(tensors, path)
    match = (
        r"not in PyLO's layout of MetaMLP \(SmallFC\): missing keys \['network\.output\.bias'\], "
        r"unexpected keys \['network\.linear_1\.weight'\]"
    )
    _one_line_error(CheckpointError, match, import_pylo, path)
    celo2 = pylo_state_dict(elo.Celo2(key=jr.key(0)))
    del celo2["w0.13"]
    _one_line_error(
        CheckpointError, r"CELO2MLP \(Celo2\): missing keys \['w0\.13'\]", import_pylo, celo2
    )
    _one_line_error(CheckpointError, "missing keys", import_pylo, {"embedding": np.zeros(3)})
    wide = pylo_state_dict(elo.SmallFC(key=jr.key(0)))
    wide["network.input.weight"] = np.zeros((32, 40), np.float32)
    _one_line_error(
        CheckpointError,
        r"'network\.input\.weight' has shape \(32, 40\); .* needs \(32, 39\)",
        import_pylo,
        wide,
    )
    integers = pylo_state_dict(elo.SmallFC(key=jr.key(0)))
    integers["network.output.bias"] = np.zeros(2, np.int32)
    _one_line_error(CheckpointError, "dtype int32; expected float", import_pylo, integers)


def test_corrupt_files_and_directories_are_refused(tmp_path):
    lo = elo.SmallFC(key=jr.key(0))
    path = export_pylo(tmp_path / "hub", lo)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _one_line_error(CheckpointError, "is not a readable safetensors file", import_pylo, path)
    path.write_bytes(b"\x00" * 3)
    _one_line_error(CheckpointError, "is not a readable safetensors file", import_pylo, path.parent)
    export_pylo(tmp_path / "hub", lo)
    (tmp_path / "hub" / "config.json").write_text("{not json")
    _one_line_error(
        CheckpointError, "config.json is not readable JSON", import_pylo, tmp_path / "hub"
    )
    (tmp_path / "hub" / "config.json").write_text(
        json.dumps({"hidden_size": 32, "hidden_layers": 2})
    )
    _one_line_error(CheckpointError, "model config hidden_layers=2", import_pylo, tmp_path / "hub")
    (tmp_path / "empty").mkdir()
    _one_line_error(CheckpointError, "has no model.safetensors", import_pylo, tmp_path / "empty")
    _one_line_error(CheckpointError, "does not exist", import_pylo, tmp_path / "none.safetensors")
    with without_runtime_type_checks():
        _one_line_error(TypeError, "state dict, got int", import_pylo, 3)


def test_unsupported_settings_are_refused():
    tensors = pylo_state_dict(elo.Celo2(key=jr.key(0)))
    _one_line_error(
        ValueError,
        "ns_iters=6 is not supported",
        import_pylo,
        tensors,
        optimizer_config={"ns_iters": 6},
    )
    _one_line_error(
        ValueError,
        "unknown optimizer config key 'betas'",
        import_pylo,
        tensors,
        optimizer_config={"betas": [0.9]},
    )
    _one_line_error(
        ValueError,
        "ff_hidden_size=16 does not match",
        import_pylo,
        tensors,
        optimizer_config={"ff_hidden_size": 16},
    )
    _one_line_error(
        ValueError,
        r"has no hyperparameter\(s\) \['step_mult'\]",
        import_pylo,
        tensors,
        step_mult=1e-3,
    )


# ------------------------------------------------------------------------------------------------
# elo.pretrained: local directories and Hub names.


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """huggingface_hub in offline mode with an empty cache: what a machine without network
    sees."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.delenv("ELO_HUB_DIR", raising=False)


def test_pretrained_reads_local_directories_and_hub_names(tmp_path, monkeypatch, offline_hub):
    lo = perturbed(elo.Celo2(key=jr.key(8), peak_lr=3e-4))
    export_pylo(tmp_path / "hub" / "someone" / "elo-celo2", lo)
    assert bitwise_equal(elo.pretrained(tmp_path / "hub" / "someone" / "elo-celo2"), lo)
    assert bitwise_equal(
        elo.pretrained(str(tmp_path / "hub/someone/elo-celo2/model.safetensors")), lo
    )
    assert bitwise_equal(elo.pretrained("hf:someone/elo-celo2", hub_dir=tmp_path / "hub"), lo)
    monkeypatch.setenv("ELO_HUB_DIR", str(tmp_path / "hub"))
    assert bitwise_equal(elo.pretrained("hf:someone/elo-celo2"), lo)
    # The .eqx files of elo too.
    elo.save_optimizer(tmp_path / "lo.eqx", lo)
    assert bitwise_equal(elo.pretrained(tmp_path / "lo.eqx"), lo)


def test_pretrained_downloads_hub_names(tmp_path, monkeypatch):
    """The download path, with `hf_hub_download` replaced by a copy from a local "Hub" (the
    tests run offline)."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from huggingface_hub.errors import EntryNotFoundError

    lo = perturbed(elo.SmallFC(key=jr.key(9)))
    export_pylo(tmp_path / "remote" / "someone" / "elo", lo)
    (tmp_path / "remote" / "someone" / "elo" / "config.json").unlink()
    calls = []

    def fake_download(repo_id, filename):
        calls.append((repo_id, filename))
        path = tmp_path / "remote" / repo_id / filename
        if not path.is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(path)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.setattr("elo._files._pretrained._unreachable", lambda url, timeout: None)
    monkeypatch.delenv("ELO_HUB_DIR", raising=False)
    assert bitwise_equal(elo.pretrained("hf:someone/elo"), lo)
    assert calls == [("someone/elo", "model.safetensors"), ("someone/elo", "config.json")]


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """huggingface_hub online, with an empty cache, and its endpoint a closed local port (the
    discard port): what a machine without network sees when nobody set `HF_HUB_OFFLINE`."""
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(
        constants,
        "HUGGINGFACE_CO_URL_TEMPLATE",
        "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}",
    )
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ELO_HUB_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_hub_names_fail_fast_when_the_hub_is_unreachable(unreachable_hub, capfd, caplog):
    start = time.monotonic()
    _one_line_error(
        ValueError,
        r"^Cannot load 'hf:DiamondXL/elo': the download failed: 127\.0\.0\.1:9 cannot be "
        r"reached \(.*\), and DiamondXL/elo is not in the Hugging Face cache\. Offline, pass",
        elo.pretrained,
        "hf:DiamondXL/elo",
    )
    assert time.monotonic() - start < 3.0
    assert "Retry" not in capfd.readouterr().err + caplog.text


def test_hub_names_wait_for_a_silent_host_two_seconds(unreachable_hub, monkeypatch):
    import socket

    release = threading.Event()

    def silent(*args, **kwargs):
        release.wait(60)
        raise OSError("released")

    monkeypatch.setattr(socket, "create_connection", silent)
    start = time.monotonic()
    try:
        _one_line_error(
            ValueError, r"127\.0\.0\.1:9 did not answer within 2 s", elo.pretrained, "hf:a/b"
        )
    finally:
        release.set()
    assert time.monotonic() - start < 3.0


def test_hub_names_read_the_cache_when_the_hub_is_unreachable(
    unreachable_hub, tmp_path, monkeypatch
):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    lo = perturbed(elo.SmallFC(key=jr.key(9)))
    export_pylo(tmp_path / "cache" / "someone" / "elo", lo)
    calls = []

    def cached(repo_id, filename, local_files_only=False):
        calls.append((filename, local_files_only))
        return str(tmp_path / "cache" / repo_id / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", cached)
    assert bitwise_equal(elo.pretrained("hf:someone/elo"), lo)
    assert calls == [("model.safetensors", True), ("config.json", True)]


def test_hub_names_offline_say_how_to_pass_a_local_directory(tmp_path, offline_hub, monkeypatch):
    match = r"Cannot load 'hf:DiamondXL/elo': .*elo\.pretrained\('/path/to/dir'\)"
    _one_line_error(ValueError, match, elo.pretrained, "hf:DiamondXL/elo")
    _one_line_error(
        ValueError,
        f"no model.safetensors in {tmp_path}",
        elo.pretrained,
        "hf:DiamondXL/elo",
        hub_dir=tmp_path,
    )
    _one_line_error(ValueError, "Malformed Hub name 'hf:elo'", elo.pretrained, "hf:elo")
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    _one_line_error(
        ValueError,
        r"huggingface_hub is not installed \(pip install 'elo-optimizers\[pylo\]'\)",
        elo.pretrained,
        "hf:DiamondXL/elo",
    )
    _one_line_error(
        ValueError, "Unknown pretrained optimizer 'nope'.*hf:OWNER/NAME", elo.pretrained, "nope"
    )


def test_cli_reaches_hub_names_through_pretrained(offline_hub, tmp_path, capsys):
    from elo.cli import main

    lo = perturbed(elo.SmallFC(key=jr.key(1)))
    export_pylo(tmp_path / "repo", lo)
    out = tmp_path / "e.json"
    task = ["--task", "quadratic-d4", "--steps", "5", "--seeds", "1", "--out", str(out)]
    assert main(["evaluate", f"pretrained:{tmp_path / 'repo'}", *task]) == 0
    assert main(["evaluate", "pretrained:hf:DiamondXL/elo", *task]) == 2
    assert "pass a local directory" in capsys.readouterr().err
