"""Export trained learned optimizers: a plain `.eqx` format and PyLO's PyTorch layout.

An optimizer file, like a checkpoint's header, describes the learned optimizer as its class
name and constructor hyperparameters (`optimizer_spec`); the weights follow as array leaves.
"""

import dataclasses
import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.random as jr
import numpy as np
import safetensors.numpy

from ._build import OPTIMIZERS
from ._io import (
    atomic_write,
    CHECKPOINT_FORMAT,
    CheckpointError,
    deserialise,
    OPTIMIZER_FORMAT,
    OPTIMIZER_VERSION,
    read_framed,
    serialise,
    write_framed,
)
from ._run_dir import RUN_CHECKPOINT
from .optimizers._base import AbstractLearnedOptimizer
from .optimizers._celo2 import Celo2
from .optimizers._mlp_optimizer import AbstractMLPOptimizer
from .optimizers._newton_schulz import NS_COEFFS
from .optimizers._small_fc import SmallFC


# Learned-optimizer classes by class name, as file headers record them.
_OPTIMIZER_CLASSES: dict[str, Any] = {cls.__name__: cls for cls in OPTIMIZERS.values()}


def optimizer_spec(lo: AbstractLearnedOptimizer) -> dict[str, Any]:
    """The learned optimizer's class and constructor hyperparameters, JSON-serialisable."""
    name = type(lo).__name__
    if name not in _OPTIMIZER_CLASSES or not isinstance(lo, AbstractMLPOptimizer):
        raise CheckpointError(
            f"Cannot save a learned optimizer of type {name}; supported: "
            f"{', '.join(_OPTIMIZER_CLASSES)}."
        )
    accepted = inspect.signature(type(lo).__init__).parameters
    hyper: dict[str, Any] = {"hidden_size": int(lo.b0.shape[0])}
    for field in dataclasses.fields(lo):
        if field.metadata.get("static", False) and field.name in accepted:
            value = getattr(lo, field.name)
            hyper[field.name] = list(value) if isinstance(value, tuple) else value
    return {"class": name, "hyperparameters": hyper}


def optimizer_from_spec(spec: Mapping[str, Any], *, what: str) -> AbstractLearnedOptimizer:
    """A learned optimizer with the hyperparameters of `spec` (weights are placeholders)."""
    name = spec.get("class") if isinstance(spec, Mapping) else None
    if name not in _OPTIMIZER_CLASSES:
        raise CheckpointError(
            f"{what} holds a learned optimizer of unknown class {name!r}; known: "
            f"{', '.join(_OPTIMIZER_CLASSES)}."
        )
    cls = _OPTIMIZER_CLASSES[name]
    hyper = dict(spec.get("hyperparameters") or {})
    accepted = inspect.signature(cls.__init__).parameters
    unknown = sorted(k for k in hyper if k not in accepted)
    if unknown:
        raise CheckpointError(
            f"{what} sets {name} hyperparameter(s) {unknown} that this elo does not know."
        )
    hyper = {k: tuple(v) if isinstance(v, list) else v for k, v in hyper.items()}
    try:
        return cls(key=jr.key(0), **hyper)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{what} has invalid {name} hyperparameters: {e}") from None


def save_optimizer(path: str | os.PathLike, lo: AbstractLearnedOptimizer) -> None:
    """Save a learned optimizer on its own, to be used after meta-training.

    The file is the plain Equinox format: one line of JSON (the format version, the class,
    every hyperparameter needed to rebuild the module, and the payload's SHA-256), then the
    weights written by `eqx.tree_serialise_leaves`. [`elo.load_optimizer`][] reads it back bit
    for bit. The write is atomic.

    **Arguments:**

    - `path`: the file to write; by convention it ends in `.eqx`.
    - `lo`: the learned optimizer, e.g. `state.learned_optimizer`.

    **Returns:**

    Nothing.

    !!! example

        ```python
        elo.save_optimizer("small_fc.eqx", state.learned_optimizer)
        lo = elo.load_optimizer("small_fc.eqx")
        opt = elo.as_optax(lo, num_steps=5_000)
        ```
    """
    if not isinstance(lo, AbstractLearnedOptimizer):
        raise TypeError(f"save_optimizer expects a learned optimizer, got {type(lo).__name__}.")
    header = {"format": OPTIMIZER_FORMAT, "version": OPTIMIZER_VERSION, **optimizer_spec(lo)}
    write_framed(path, header, [serialise(lo)])


def load_optimizer(path: str | os.PathLike) -> AbstractLearnedOptimizer:
    """Load a learned optimizer from an exported file, a checkpoint or a run directory.

    **Arguments:**

    - `path`: a file written by [`elo.save_optimizer`][] (or `elo export --format eqx`), a
      checkpoint written by [`elo.save`][], or a run directory of `elo meta-train` (its latest
      checkpoint is used).

    **Returns:**

    The learned optimizer (e.g. an [`elo.SmallFC`][]), with exactly the saved weights and
    hyperparameters.

    **Raises:**

    `elo.CheckpointError` (a `ValueError`) if the file is missing, corrupt or of another format.
    """
    path = Path(path)
    if path.is_dir():
        checkpoint = path / RUN_CHECKPOINT
        if not checkpoint.is_file():
            raise CheckpointError(
                f"Run directory {path} has no checkpoint yet ({RUN_CHECKPOINT} is missing)."
            )
        path = checkpoint
    header, sections = read_framed(
        path,
        expected_format=(OPTIMIZER_FORMAT, CHECKPOINT_FORMAT),
        what="File",
        versions={OPTIMIZER_FORMAT: (OPTIMIZER_VERSION,), CHECKPOINT_FORMAT: (1, 2)},
    )
    if header["format"] == CHECKPOINT_FORMAT:
        # A checkpoint's first section is the learned optimizer (see `elo.save`).
        what, expected, spec = f"Checkpoint {path}", 2, header.get("optimizer") or {}
    else:
        what, expected, spec = f"Optimizer file {path}", 1, header
    if len(sections) != expected:
        raise CheckpointError(f"{what} has {len(sections)} sections; expected {expected}.")
    like = optimizer_from_spec(spec, what=what)
    return deserialise(sections[0], like, what=what)


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


def _pylo_configs(
    lo: AbstractLearnedOptimizer,
) -> tuple[str, dict[str, Any], str, dict[str, Any]]:
    """(PyLO model class, its constructor kwargs, PyLO optimizer class, its constructor kwargs)."""
    hidden = int(lo.b0.shape[0])  # pyright: ignore
    if isinstance(lo, SmallFC):
        model = {"input_size": 39, "hidden_size": hidden, "hidden_layers": 1}
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
    assert isinstance(lo, Celo2)
    model = {
        "feature_dims": list(_CELO2_FEATURE_DIMS),
        "hidden_size": hidden,
        "hidden_layers": 2,
        "output_size": 3,
        "activation": "relu",
    }
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
    tensors = pylo_state_dict(lo)
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
        "momentum_decays": json.dumps(list(lo.momentum_decays)),  # pyright: ignore
        "rms_decays": json.dumps(list(lo.rms_decays)),  # pyright: ignore
        "adafactor_decays": json.dumps(list(lo.adafactor_decays)),  # pyright: ignore
    }
    path = Path(path)
    if path.suffix == ".safetensors":
        target = path
    else:
        target = path / "model.safetensors"
        atomic_write(path / "config.json", [json.dumps(model, indent=2).encode() + b"\n"])
    atomic_write(target, [safetensors.numpy.save(tensors, metadata=metadata)])
    return target
