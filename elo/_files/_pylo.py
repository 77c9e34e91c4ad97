"""PyLO's PyTorch layout of the learned optimizers: `export_pylo`, `pylo_state_dict` and the
inverse, `import_pylo`.

PyLO (github.com/Belilovsky-Lab/pylo) runs learned optimizers in PyTorch and publishes the
paper's ELO and ELO-Celo2 weights on the Hugging Face Hub in this layout; its `celo2` branch
holds the Celo2 authors' published weights (`_pylo_celo2.py`).
"""

import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
import safetensors.numpy

from ..optimizers._base import AbstractLearnedOptimizer
from ..optimizers._celo2 import Celo2
from ..optimizers._newton_schulz import NS_COEFFS
from ..optimizers._small_fc import SmallFC
from ._flax_msgpack import read_flax_msgpack
from ._framing import atomic_write, CheckpointError
from ._optimizer_file import optimizer_spec
from ._pylo_celo2 import (
    celo2_naive_kwargs,
    CELO2_NAIVE_SETTINGS,
    celo2_naive_weights,
    check_adam_betas,
    DENSE_NAMES,
    GROUPED_NAMES,
    HAIKU_NAMES,
)
from ._torch_state_dict import read_torch_state_dict


_PYLO_COMMIT = "d05c6c1e4f4d7c46a91828a0826c2699bfe48211"
# The commit of PyLO (github.com/Belilovsky-Lab/pylo) whose `pylo/models/Meta_MLP.py`,
# `pylo/models/CELO2_MLP.py`, `pylo/optim/ELO_naive.py` and `pylo/optim/ELO_CELO2_naive.py` the
# exported names, shapes and constructor arguments were checked against.

_CELO2_FEATURE_DIMS = (1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3)
# PyLO's `CELO2_FEATURE_DIMS`: the widths of Celo2's 14 input groups, in the order of the rows of
# `elo`'s stacked `w0 [30, h]`.


def pylo_state_dict(lo: AbstractLearnedOptimizer) -> dict[str, np.ndarray]:
    """The learned optimizer's MLP as a PyTorch `state_dict` in PyLO's layout.

    The names and shapes are those of PyLO's meta-models (Belilovsky-Lab/pylo at commit
    `d05c6c1`), so `module.load_state_dict(state_dict, strict=True)` accepts them:

    - [`elo.SmallFC`][] → `MetaMLP(input_size=39, hidden_size=h, hidden_layers=1)`
      (`pylo/models/Meta_MLP.py`; ELO counts the output layer, PyLO does not). Its layers are
      `torch.nn.Linear`, which stores `weight` as `[out, in]` and computes `x @ weight.T + bias`,
      so every matrix is `elo`'s `[in, out]` transposed: `network.input.{weight,bias}` =
      `w0.T, b0`, `network.linear_0.{weight,bias}` = `w1.T, b1`, `network.output.{weight,bias}`
      = `w2.T, b2`.
    - [`elo.Celo2`][] → `CELO2MLP(hidden_size=h, hidden_layers=2, output_size=3)`
      (`pylo/models/CELO2_MLP.py`), which computes `x @ w` with `w: [in, out]` like `elo`, so
      nothing is transposed. Its first layer is split by input group: `w0.0` ... `w0.13` are
      the rows of `w0` of the 14 groups (widths `1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3`),
      then `b0` = `b0`, `dense_w.0, dense_b.0` = `w1, b1` and `dense_w.1, dense_b.1` =
      `w2, b2`.

    **Arguments:**

    - `lo`: a `SmallFC` or `Celo2`.

    **Returns:**

    A dict of contiguous float32 numpy arrays keyed by PyTorch parameter names.
    """
    if not isinstance(lo, (SmallFC, Celo2)):
        raise TypeError(f"No PyLO layout for {type(lo).__name__}; supported: SmallFC, Celo2.")
    weights = lo.export_weights()
    if isinstance(lo, SmallFC):
        out = {}
        for i, name in enumerate(("network.input", "network.linear_0", "network.output")):
            out[f"{name}.weight"] = weights[f"w{i}"].T
            out[f"{name}.bias"] = weights[f"b{i}"]
    else:
        bounds = np.cumsum((0,) + _CELO2_FEATURE_DIMS)
        if bounds[-1] != weights["w0"].shape[0]:
            raise ValueError(
                f"Celo2's w0 has {weights['w0'].shape[0]} rows; PyLO's CELO2MLP expects "
                f"{bounds[-1]}."
            )
        out = {
            f"w0.{k}": weights["w0"][bounds[k] : bounds[k + 1]]
            for k in range(len(_CELO2_FEATURE_DIMS))
        }
        out |= {"b0": weights["b0"], "dense_w.0": weights["w1"], "dense_w.1": weights["w2"]}
        out |= {"dense_b.0": weights["b1"], "dense_b.1": weights["b2"]}
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def _model_config(cls: type, hidden: int) -> dict[str, Any]:
    """The constructor arguments of PyLO's meta-model for `cls` (SmallFC or Celo2)."""
    if cls is SmallFC:
        return {"input_size": SmallFC.num_features, "hidden_size": hidden, "hidden_layers": 1}
    return {
        "feature_dims": list(_CELO2_FEATURE_DIMS),
        "hidden_size": hidden,
        "hidden_layers": 2,
        "output_size": 3,
        "activation": "relu",
    }


def _pylo_configs(
    lo: SmallFC | Celo2,
) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """(PyLO model class, its constructor kwargs, PyLO optimizer class, its constructor kwargs)."""
    hidden = int(lo.b0.shape[0])
    model = _model_config(type(lo), hidden)
    if isinstance(lo, SmallFC):
        optimizer = {
            "lr": lo.step_mult,
            "exp_mult": lo.exp_mult,
            "weight_decay": lo.weight_decay,
            "hidden_size": hidden,
            "hidden_layers": 1,
            "initial_momentum_decays": list(lo.momentum_decays),
            "initial_rms_decays": list(lo.rms_decays),
            "initial_adafactor_decays": list(lo.adafactor_decays),
            "clip_grad": lo.clip_grad,
            "clip_norm": lo.clip_norm,
        }
        return "MetaMLP", model, "ELO_naive", optimizer
    optimizer = {
        "lr": lo.peak_lr,
        "weight_decay": lo.weight_decay,
        "clip_grad": lo.clip_grad,
        "clip_norm": lo.clip_norm,
        "adam_lr_mult": lo.adam_lr_mult,
        "adam_weight_decay": lo.adam_weight_decay,
        "use_adamw_for_1d": True,
        "orthogonalize": lo.orthogonalize,
        "ff_hidden_size": hidden,
        "ff_hidden_layers": 2,
        "initial_momentum_decays": list(lo.momentum_decays),
        "initial_rms_decays": list(lo.rms_decays),
        "initial_adafactor_decays": list(lo.adafactor_decays),
        "exp_mult": 0.0,
        "rmsmult": 1.0,
        "param_scale_mult": False,
        "ns_coeffs": list(NS_COEFFS),
        "ns_iters": 5,
        "ns_eps": 1e-8,
        # ELO's Celo2 has no ±1000 gradient clip (PyLO's default); the float32 maximum keeps
        # finite gradients as they are.
        "grad_clip_val": float(np.finfo(np.float32).max),
    }
    return "CELO2MLP", model, "ELO_CELO2_naive", optimizer


def export_pylo(path: str | os.PathLike, lo: AbstractLearnedOptimizer) -> Path:
    """Write a learned optimizer's weights for PyTorch, in PyLO's layout (safetensors).

    The layout is checked against PyLO (github.com/Belilovsky-Lab/pylo) at commit
    `d05c6c1e4f4d7c46a91828a0826c2699bfe48211`: the tensors are exactly the `state_dict` of
    `pylo.models.MetaMLP` (for [`elo.SmallFC`][]) or `pylo.models.CELO2MLP` (for
    [`elo.Celo2`][]), see [`elo.pylo_state_dict`][], so `load_state_dict(..., strict=True)`
    accepts them. The hyperparameters travel as safetensors metadata (string values,
    JSON-encoded):

    - `pylo_model` (`MetaMLP` or `CELO2MLP`) and `model_config`, its constructor arguments;
    - `pylo_optimizer` and `optimizer_config`, the keyword arguments of PyLO's optimizer:
      `ELO_naive` (`lr`, `exp_mult`, `weight_decay`, `hidden_size`, `hidden_layers`,
      `initial_{momentum,rms,adafactor}_decays`, `clip_grad`, `clip_norm`) or
      `ELO_CELO2_naive` (`lr`, `weight_decay`, `adam_lr_mult`, `adam_weight_decay`,
      `ff_hidden_size`, the decays, `ns_coeffs`, ...; `grad_clip_val` is the float32 maximum
      because ELO's Celo2 does not clip gradients to ±1000);
    - `elo_hyperparameters`, all of `elo`'s own hyperparameters, and `pylo_commit`;
    - `momentum_decays`, `rms_decays`, `adafactor_decays`: the accumulator decays. They are
      fixed in ELO, so PyLO's learned decay offsets of `AdafacLO` are zero.

    PyLO's optimizers apply `lr` as given, with no schedule of their own: `lr` is the peak
    rate (`step_mult`, or Celo2's `peak_lr`), and `elo`'s warmup and decay (in
    `elo_hyperparameters`) have to be driven by a `torch.optim.lr_scheduler`. Parameters that
    ELO's Celo2 sends to AdamW because their path contains `"embed"` go in a parameter group
    with `is_embedding=True` in `ELO_CELO2_naive`.

    If `path` ends in `.safetensors` that file is written. Otherwise `path` is a directory that
    receives `model.safetensors` and `config.json` (the model's constructor arguments), the
    layout of Hugging Face's `PyTorchModelHubMixin`, so `MetaMLP.from_pretrained(path)` (or
    `CELO2MLP.from_pretrained(path)`) works.

    **Arguments:**

    - `path`: a `.safetensors` file or a directory.
    - `lo`: a [`elo.SmallFC`][] or [`elo.Celo2`][].

    **Returns:**

    The path of the `.safetensors` file written.

    !!! example

        ```python
        elo.export_pylo("exported/", lo)
        # then, in PyTorch, with PyLO installed from its GitHub repository:
        #   import json, safetensors
        #   from pylo.models import MetaMLP
        #   from pylo.optim import ELO_naive
        #   net = MetaMLP.from_pretrained("exported/")
        #   with safetensors.safe_open("exported/model.safetensors", "pt") as f:
        #       config = json.loads(f.metadata()["optimizer_config"])
        #   opt = ELO_naive(model.parameters(), network=net, hf_key=None, **config)
        ```
    """
    tensors = pylo_state_dict(lo)  # refuses any other class than these two
    assert isinstance(lo, (SmallFC, Celo2))
    pylo_model, model, pylo_optimizer, optimizer = _pylo_configs(lo)
    metadata = {
        "format": "pylo",
        "exporter": "elo",
        "elo_class": type(lo).__name__,
        "elo_hyperparameters": json.dumps(optimizer_spec(lo)["hyperparameters"]),
        "pylo_commit": _PYLO_COMMIT,
        "pylo_model": pylo_model,
        "model_config": json.dumps(model),
        "pylo_optimizer": pylo_optimizer,
        "optimizer_config": json.dumps(optimizer),
        "momentum_decays": json.dumps(list(lo.momentum_decays)),
        "rms_decays": json.dumps(list(lo.rms_decays)),
        "adafactor_decays": json.dumps(list(lo.adafactor_decays)),
    }
    path = Path(path)
    if path.suffix == ".safetensors":
        target = path
    else:
        target = path / "model.safetensors"
        atomic_write(path / "config.json", [json.dumps(model, indent=2).encode() + b"\n"])
    atomic_write(target, [safetensors.numpy.save(tensors, metadata=metadata)])
    return target


# ------------------------------------------------------------------------------------------------
# Import: PyLO's tensors (and, where recorded, hyperparameters) -> SmallFC / Celo2.

_HUB_WEIGHTS = "model.safetensors"
_HUB_CONFIG = "config.json"
_FLAX_THETA = "theta.state"
_SMALL_FC_LAYERS = ("network.input", "network.linear_0", "network.output")
_CELO2_NAMES = (
    *(f"w0.{k}" for k in range(len(_CELO2_FEATURE_DIMS))),
    "b0",
    "dense_w.0",
    "dense_b.0",
    "dense_w.1",
    "dense_b.1",
)
_SMALL_FC_NAMES = tuple(f"{layer}.{p}" for layer in _SMALL_FC_LAYERS for p in ("weight", "bias"))

# The keyword defaults of PyLO's optimizers `ELO_naive` and `ELO_CELO2_naive` (commit
# `_PYLO_COMMIT`): what PyLO runs a published file with when nothing else is given.
_PYLO_OPTIMIZER_DEFAULTS: dict[type, dict[str, Any]] = {
    SmallFC: {
        "lr": 1e-3,
        "exp_mult": 1e-3,
        "weight_decay": 0.0,
        "initial_momentum_decays": [0.9, 0.99, 0.999],
        "initial_rms_decays": [0.999],
        "initial_adafactor_decays": [0.9, 0.99, 0.999],
        "clip_grad": False,
        "clip_norm": 1.0,
    },
    Celo2: {
        "lr": 1e-3,
        "weight_decay": 0.1,
        "clip_grad": True,
        "clip_norm": 1.0,
        "adam_lr_mult": 1.0,
        "adam_weight_decay": None,
        "orthogonalize": True,
        "initial_momentum_decays": [0.9, 0.99, 0.999],
        "initial_rms_decays": [0.95],
        "initial_adafactor_decays": [0.9, 0.99, 0.999],
    },
}
# PyLO keyword -> `elo` keyword(s). `lr` is PyLO's constant rate: small_fc's `step_mult`, and
# Celo2's `init_lr = peak_lr = end_lr`.
_RENAMES: dict[type, dict[str, tuple[str, ...]]] = {
    SmallFC: {
        "lr": ("step_mult",),
        "exp_mult": ("exp_mult",),
        "weight_decay": ("weight_decay",),
        "initial_momentum_decays": ("momentum_decays",),
        "initial_rms_decays": ("rms_decays",),
        "initial_adafactor_decays": ("adafactor_decays",),
        "clip_grad": ("clip_grad",),
        "clip_norm": ("clip_norm",),
    },
    Celo2: {
        "lr": ("init_lr", "peak_lr", "end_lr"),
        "weight_decay": ("weight_decay",),
        "clip_grad": ("clip_grad",),
        "clip_norm": ("clip_norm",),
        "adam_lr_mult": ("adam_lr_mult",),
        "adam_weight_decay": ("adam_weight_decay",),
        "orthogonalize": ("orthogonalize",),
        "initial_momentum_decays": ("momentum_decays",),
        "initial_rms_decays": ("rms_decays",),
        "initial_adafactor_decays": ("adafactor_decays",),
    },
}
# PyLO keywords whose only value `elo` implements, and keywords that do not change the update
# (where the weights come from; Celo2's ±`grad_clip_val` clip, which ELO's Celo2 does not have).
_REQUIRED: dict[type, dict[str, Any]] = {
    SmallFC: {"hidden_layers": 1},
    Celo2: {
        "ff_hidden_layers": 2,
        "use_adamw_for_1d": True,
        "exp_mult": 0.0,
        "rmsmult": 1.0,
        "param_scale_mult": False,
        "ns_coeffs": list(NS_COEFFS),
        "ns_iters": 5,
        "ns_eps": 1e-8,
    },
}
_IGNORED = frozenset({"hf_key", "checkpoint_path", "network", "grad_clip_val"})
_HIDDEN_KEY = {SmallFC: "hidden_size", Celo2: "ff_hidden_size"}


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    if not path.is_file():
        raise CheckpointError(f"PyLO file {path} does not exist.")
    try:
        tensors = safetensors.numpy.load_file(path)
        with safetensors.safe_open(path, framework="numpy") as f:
            metadata = dict(f.metadata() or {})
    except Exception as e:  # safetensors raises its own error types, and OSError
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            f"{path} is not a readable safetensors file ({reason}); export it again with "
            "elo.export_pylo or PyLO's save_pretrained."
        ) from None
    return tensors, metadata


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{what} {path} is not readable JSON ({e}).") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{what} {path} must hold a JSON object, got {value!r:.60}.")
    return value


def _unwrap(tree: Mapping[str, Any]) -> Mapping[str, Any]:
    """Strip single-key nesting (`{"ff_mod_stack": {"~": {...}}}`) down to the arrays."""
    while len(tree) == 1 and isinstance(next(iter(tree.values())), Mapping):
        tree = next(iter(tree.values()))
    return tree


def _read_file(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str], str]:
    """(tensors, safetensors metadata, a description) of a file, by its content: a PyTorch zip
    archive, a flax msgpack file or safetensors."""
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == b"PK\x03\x04":
        return read_torch_state_dict(path), {}, f"PyTorch file {path}"
    if head[:1] and (0x80 <= head[0] <= 0x8F or head[0] in (0xDE, 0xDF)):
        tree = _unwrap(read_flax_msgpack(path))
        if not all(isinstance(v, np.ndarray) for v in tree.values()):
            raise CheckpointError(
                f"flax file {path} does not hold one dict of arrays (keys {sorted(tree)[:8]})."
            )
        return dict(tree), {}, f"flax file {path}"
    tensors, metadata = _read_safetensors(path)
    return tensors, metadata, f"PyLO file {path}"


def _read_source(
    source: str | os.PathLike | Mapping[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, Any] | None, str]:
    """(tensors, safetensors metadata, the hub's `config.json` or None, a description)."""
    if isinstance(source, Mapping):
        tensors = {}
        for name, value in source.items():
            if hasattr(value, "detach"):  # a torch tensor: numpy() needs it off the graph and CPU
                value = value.detach().cpu().numpy()
            tensors[str(name)] = np.asarray(value)
        return tensors, {}, None, "The state dict"
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            "import_pylo expects a .safetensors file, a directory in the Hugging Face Hub layout "
            f"or a state dict, got {type(source).__name__}."
        )
    path = Path(source).expanduser()
    if path.is_dir():
        weights = path / _HUB_WEIGHTS
        if not weights.is_file() and (path / _FLAX_THETA).is_file():
            tensors, metadata, what = _read_file(path / _FLAX_THETA)
            return tensors, metadata, None, what
        if not weights.is_file():
            present = sorted(p.name for p in path.iterdir())[:8]
            raise CheckpointError(
                f"Directory {path} has no {_HUB_WEIGHTS} (it holds {present}); expected the "
                f"Hugging Face Hub layout ({_HUB_WEIGHTS} and {_HUB_CONFIG}) that "
                "elo.export_pylo(directory, lo) and PyLO's save_pretrained write, or the "
                f"Celo2 authors' {_FLAX_THETA}."
            )
        config_path = path / _HUB_CONFIG
        config = _read_json(config_path, "Model config") if config_path.is_file() else None
        tensors, metadata = _read_safetensors(weights)
        return tensors, metadata, config, f"PyLO file {weights}"
    if not path.exists():
        raise CheckpointError(
            f"PyLO file {path} does not exist; pass a .safetensors, PyTorch .pt or flax "
            f"{_FLAX_THETA} file, or a directory holding {_HUB_WEIGHTS} or {_FLAX_THETA}."
        )
    tensors, metadata, what = _read_file(path)
    return tensors, metadata, None, what


_LAYOUTS: dict[str, tuple[type | None, frozenset[str]]] = {
    "MetaMLP (SmallFC)": (SmallFC, frozenset(_SMALL_FC_NAMES)),
    "CELO2MLP (Celo2)": (Celo2, frozenset(_CELO2_NAMES)),
    # The Celo2 authors' published weights, for PyLO's `Celo2_naive` (`None`: that flavour).
    "Celo2MLP, per group (celo2_weights.pt)": (None, GROUPED_NAMES),
    "Celo2MLP": (None, DENSE_NAMES),
    "Celo2MLP as the Celo2 authors' haiku parameters (theta.state)": (None, HAIKU_NAMES),
}


def _layout(tensors: Mapping[str, np.ndarray], what: str) -> type | None:
    """SmallFC or Celo2 by the tensor names, or None for the layouts of PyLO's `Celo2_naive`; a
    one-line error naming the difference otherwise."""
    names = set(tensors)
    for cls, expected in _LAYOUTS.values():
        if names == expected:
            return cls
    # Report against the layout the file is closest to.
    model, (_, best) = max(_LAYOUTS.items(), key=lambda item: len(names & item[1][1]))
    missing = sorted(best - names)
    unexpected = sorted(names - best)
    raise CheckpointError(
        f"{what} is not in PyLO's layout of {model}: missing keys {missing[:10]}, unexpected keys "
        f"{unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}. elo imports PyLO's "
        "MetaMLP (hidden_layers=1), CELO2MLP (hidden_layers=2) and Celo2MLP state dicts and "
        "the Celo2 authors' theta.state."
    )


def _import_celo2_naive(
    tensors: Mapping[str, np.ndarray],
    what: str,
    optimizer_config: Mapping[str, Any] | None,
    hyperparameters: Mapping[str, Any],
) -> Celo2:
    """The Celo2 authors' weights with the settings of PyLO's `Celo2_naive`."""
    weights = celo2_naive_weights(tensors, what)
    kwargs = dict(CELO2_NAIVE_SETTINGS)
    if optimizer_config is not None:
        kwargs |= celo2_naive_kwargs(optimizer_config, "import_pylo")
    kwargs |= hyperparameters
    check_adam_betas(kwargs, "import_pylo")
    try:
        return Celo2(weights=weights, **kwargs)
    except TypeError as e:
        raise ValueError(f"import_pylo: {e}") from None


def _expected_shapes(cls: type, hidden: int) -> dict[str, tuple[int, ...]]:
    if cls is SmallFC:
        return {
            "network.input.weight": (hidden, SmallFC.num_features),
            "network.input.bias": (hidden,),
            "network.linear_0.weight": (hidden, hidden),
            "network.linear_0.bias": (hidden,),
            "network.output.weight": (2, hidden),
            "network.output.bias": (2,),
        }
    shapes = {f"w0.{k}": (width, hidden) for k, width in enumerate(_CELO2_FEATURE_DIMS)}
    return shapes | {
        "b0": (hidden,),
        "dense_w.0": (hidden, hidden),
        "dense_b.0": (hidden,),
        "dense_w.1": (hidden, 3),
        "dense_b.1": (3,),
    }


def _neutral_weights(
    cls: type, tensors: Mapping[str, np.ndarray], what: str
) -> tuple[dict[str, np.ndarray], int]:
    """`elo`'s weight layout (`w0 [in, h]`, ...) and the hidden width, after shape checks."""
    bias = tensors["network.input.bias" if cls is SmallFC else "b0"]
    if bias.ndim != 1 or bias.shape[0] < 1:
        raise CheckpointError(
            f"{what}: the first bias must be a non-empty vector, got {bias.shape}."
        )
    hidden = int(bias.shape[0])
    for name, shape in _expected_shapes(cls, hidden).items():
        value = tensors[name]
        if not np.issubdtype(value.dtype, np.floating):
            raise CheckpointError(
                f"{what}: tensor {name!r} has dtype {value.dtype}; expected float."
            )
        if tuple(value.shape) != shape:
            raise CheckpointError(
                f"{what}: tensor {name!r} has shape {tuple(value.shape)}; PyLO's layout with "
                f"hidden size {hidden} needs {shape}."
            )
    t = {k: np.asarray(v, np.float32) for k, v in tensors.items()}
    if cls is SmallFC:
        weights = {}
        for i, layer in enumerate(_SMALL_FC_LAYERS):
            weights[f"w{i}"] = t[f"{layer}.weight"].T
            weights[f"b{i}"] = t[f"{layer}.bias"]
        return weights, hidden
    w0 = np.concatenate([t[f"w0.{k}"] for k in range(len(_CELO2_FEATURE_DIMS))], axis=0)
    weights = {"w0": w0, "b0": t["b0"], "w1": t["dense_w.0"], "b1": t["dense_b.0"]}
    return weights | {"w2": t["dense_w.1"], "b2": t["dense_b.1"]}, hidden


def _check_model_config(cls: type, config: Mapping[str, Any], hidden: int, what: str) -> None:
    expected = _model_config(cls, hidden)
    for key, value in config.items():
        if key in expected and value != expected[key]:
            raise CheckpointError(
                f"{what}: model config {key}={value!r} does not match the tensors or is not "
                f"supported; elo imports {key}={expected[key]!r}."
            )


def _from_pylo_config(
    cls: type, config: Mapping[str, Any], hidden: int, what: str
) -> dict[str, Any]:
    """`elo` keyword arguments from keyword arguments of PyLO's optimizer."""
    if not isinstance(config, Mapping):
        raise TypeError(f"{what}: optimizer_config must be a dict, got {type(config).__name__}.")
    kwargs: dict[str, Any] = {}
    renames, required = _RENAMES[cls], _REQUIRED[cls]
    for key, value in config.items():
        if key in renames:
            for target in renames[key]:
                kwargs[target] = tuple(value) if isinstance(value, (list, tuple)) else value
        elif key == _HIDDEN_KEY[cls]:
            if value != hidden:
                raise ValueError(
                    f"{what}: optimizer config {key}={value!r} does not match the tensors' hidden "
                    f"size {hidden}."
                )
        elif key in required:
            same = list(value) if isinstance(value, (list, tuple)) else value
            if same != required[key]:
                raise ValueError(
                    f"{what}: optimizer config {key}={value!r} is not supported by elo's "
                    f"{cls.__name__}; only {key}={required[key]!r} is implemented."
                )
        elif key not in _IGNORED:
            known = sorted({*renames, *required, _HIDDEN_KEY[cls], *_IGNORED})
            raise ValueError(
                f"{what}: unknown optimizer config key {key!r} for {cls.__name__}; known keys: "
                f"{', '.join(known)}."
            )
    return kwargs


def _json_metadata(metadata: Mapping[str, str], key: str, what: str) -> Any:
    try:
        return json.loads(metadata[key])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{what}: metadata {key!r} is not valid JSON ({e}).") from None


def import_pylo(
    source: str | os.PathLike | Mapping[str, Any],
    *,
    optimizer_config: Mapping[str, Any] | None = None,
    **hyperparameters: Any,
) -> SmallFC | Celo2:
    """Read a learned optimizer in PyLO's PyTorch layout: the inverse of [`elo.export_pylo`][].

    The tensors say which optimizer it is: the `state_dict` of PyLO's `MetaMLP` (keys
    `network.input.weight`, ...) becomes an [`elo.SmallFC`][], that of `CELO2MLP` (keys
    `w0.0` ... `w0.13`, `b0`, `dense_w.*`, `dense_b.*`) an [`elo.Celo2`][], with the hidden size
    of the tensors (see [`elo.pylo_state_dict`][] for the correspondence).

    **The Celo2 authors' published optimizer.** The weights of PyLO's `celo2` branch
    (`celo2_weights.pt`: `first_layer_weights.0` ... `.13`, `first_layer_bias`, `hidden.*`,
    `output.*`; or `Celo2MLP`'s own `first_layer.weight`, ...) and the authors' flax
    `theta.state` (`{"ff_mod_stack": {"~": {"w0__0", ...}}}`) become an [`elo.Celo2`][] with
    the settings of PyLO's `Celo2_naive`: constant `lr = 1e-3`, no weight decay, no global-norm
    clip, gradients of the learned path clipped to $\\pm 1000$, AdamW at the same rate for
    vectors, embeddings and the first and last matrix, weight decay applied after the step.
    `optimizer_config` takes `Celo2_naive`'s keywords (`lr`, `weight_decay`,
    `momentum_decays`, ...). `elo`'s update then equals `Celo2_naive`'s to float32 round-off
    (tested against vectors made with PyLO itself, `tests/parity/pylo_celo2/`).

    For the other layouts, the hyperparameters are, from the weakest to the strongest:

    1. the defaults of PyLO's optimizer for that network (`ELO_naive`: `lr = 1e-3`,
       `exp_mult = 1e-3`, no weight decay, decays `(0.9, 0.99, 0.999)`, `(0.999,)`,
       `(0.9, 0.99, 0.999)`; `ELO_CELO2_naive`: constant `lr = 1e-3`, `weight_decay = 0.1`,
       `adam_lr_mult = 1`, gradient clipping to norm 1, rms decay `0.95`): the settings a file
       published for PyLO (such as the paper's ELO and ELO-Celo2 on the Hub) runs with there.
       Settings PyLO does not have (small_fc's warmup) keep `elo`'s defaults;
    2. the `optimizer_config` recorded in the file by [`elo.export_pylo`][];
    3. all of `elo`'s hyperparameters, where the file was written by `elo.export_pylo` (so
       export → import gives the same optimizer, bit for bit);
    4. the `optimizer_config` argument: keyword arguments of PyLO's optimizer (`lr`,
       `weight_decay`, `initial_rms_decays`, ...);
    5. `**hyperparameters`: keyword arguments of `SmallFC` / `Celo2` (e.g. `step_mult`,
       `warmup_fraction`).

    `ELO_CELO2_naive`'s `grad_clip_val` (an elementwise clip of Celo2's gradients, ±1000 by
    default) is not part of ELO's Celo2 and is ignored for that layout.

    **Arguments:**

    - `source`: a `.safetensors` file, a PyTorch `.pt` file (`torch.save`'s zip layout, read
      without PyTorch; only tensors, storages and ordered dicts are unpickled, anything else is
      refused), a flax msgpack file (`theta.state`); a directory in the Hugging Face Hub layout
      (`model.safetensors`, optionally `config.json`, or `theta.state`), as written by
      `elo.export_pylo(directory, lo)`, PyLO's `save_pretrained` or downloaded from the Hub; or
      a state dict (names to numpy arrays or PyTorch tensors).
    - `optimizer_config`: keyword arguments of PyLO's `ELO_naive` / `ELO_CELO2_naive` /
      `Celo2_naive`.
    - `**hyperparameters`: keyword arguments of `elo.SmallFC` / `elo.Celo2`.

    **Returns:**

    The [`elo.SmallFC`][] or [`elo.Celo2`][].

    **Raises:**

    `elo.CheckpointError` (a `ValueError`) for a missing, unreadable or unsafe file and for
    tensors of another layout (the message names the missing and unexpected keys, or the tensor
    of the wrong shape); `ValueError` for a setting `elo` does not implement.

    !!! example

        ```python
        elo.export_pylo("exported/", lo)
        assert elo.import_pylo("exported/") == lo
        lo = elo.import_pylo("pylo_weights.safetensors", optimizer_config={"lr": 3e-4})
        celo2 = elo.import_pylo("celo2_weights.pt")  # PyLO's Celo2_naive, in JAX
        ```
    """
    tensors, metadata, model_config, what = _read_source(source)
    cls = _layout(tensors, what)
    if cls is None:
        return _import_celo2_naive(tensors, what, optimizer_config, hyperparameters)
    weights, hidden = _neutral_weights(cls, tensors, what)
    if model_config is not None:
        _check_model_config(cls, model_config, hidden, what)
    if "model_config" in metadata:
        recorded = _json_metadata(metadata, "model_config", what)
        if not isinstance(recorded, Mapping):
            raise CheckpointError(f"{what}: metadata 'model_config' must be a JSON object.")
        _check_model_config(cls, recorded, hidden, what)
    kwargs = _from_pylo_config(cls, _PYLO_OPTIMIZER_DEFAULTS[cls], hidden, what)
    if "optimizer_config" in metadata:
        recorded = _json_metadata(metadata, "optimizer_config", what)
        kwargs |= _from_pylo_config(cls, recorded, hidden, what)
    if "elo_hyperparameters" in metadata:
        if metadata.get("elo_class", cls.__name__) != cls.__name__:
            raise CheckpointError(
                f"{what}: metadata elo_class={metadata['elo_class']!r} does not match the "
                f"tensors, which are {cls.__name__}'s."
            )
        recorded = _json_metadata(metadata, "elo_hyperparameters", what)
        if not isinstance(recorded, Mapping):
            raise CheckpointError(f"{what}: metadata 'elo_hyperparameters' must be an object.")
        kwargs |= {k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()}
    if optimizer_config is not None:
        kwargs |= _from_pylo_config(cls, optimizer_config, hidden, "import_pylo")
    kwargs |= hyperparameters
    kwargs["hidden_size"] = hidden
    accepted = inspect.signature(cls.__init__).parameters
    allowed = [k for k in accepted if k not in ("self", "key", "weights")]
    unknown = sorted(k for k in kwargs if k not in allowed)
    if unknown:
        raise ValueError(
            f"import_pylo: {cls.__name__} has no hyperparameter(s) {unknown}; its keyword "
            f"arguments are {', '.join(allowed)}."
        )
    return cls(weights=weights, **kwargs)
