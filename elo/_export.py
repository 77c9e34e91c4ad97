"""Export trained learned optimizers: a plain `.eqx` format and PyLO's PyTorch layout."""

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy

from ._checkpoint import (
    atomic_write,
    CHECKPOINT_FORMAT,
    CheckpointError,
    deserialise,
    load_checkpoint_optimizer,
    OPTIMIZER_FORMAT,
    optimizer_from_spec,
    optimizer_spec,
    OPTIMIZER_VERSION,
    read_framed,
    serialise,
    write_framed,
)
from .optimizers import Celo2, SmallFC
from .optimizers._base import AbstractLearnedOptimizer


RUN_CHECKPOINT = "checkpoint.eqx"
"""The checkpoint file of a run directory written by `elo meta-train`."""


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
        return load_checkpoint_optimizer(path)
    what = f"Optimizer file {path}"
    if len(sections) != 1:
        raise CheckpointError(f"{what} has {len(sections)} sections; expected 1.")
    like = optimizer_from_spec(header, what=what)
    return deserialise(sections[0], like, what=what)


def pylo_state_dict(lo: AbstractLearnedOptimizer) -> dict[str, np.ndarray]:
    """The learned optimizer's MLP as a PyTorch `state_dict` in PyLO's layout.

    `torch.nn.Linear` stores `weight` as `[out, in]` and computes `x @ weight.T + bias`, so every
    weight matrix is transposed from `elo`'s `[in, out]`.

    - [`elo.SmallFC`][] → PyLO's `MetaMLP(input_size=39, hidden_size=h, hidden_layers=1)`
      (`pylo/models/Meta_MLP.py`; ELO counts the output layer, PyLO does not):
      `network.input.{weight,bias}` = `w0.T, b0`, `network.linear_0.{weight,bias}` = `w1.T, b1`,
      `network.output.{weight,bias}` = `w2.T, b2`.
    - [`elo.Celo2`][] → PyLO's dense `Celo2MLP` (`pylo/models/Celo2_MLP.py`):
      `first_layer.{weight,bias}` = `w0.T, b0`, `hidden.{weight,bias}` = `w1.T, b1`,
      `output.{weight,bias}` = `w2.T, b2`.

    **Arguments:**

    - `lo`: a `SmallFC` or `Celo2`.

    **Returns:**

    A dict of contiguous float32 numpy arrays keyed by PyTorch parameter names.
    """
    if isinstance(lo, SmallFC):
        names = ("network.input", "network.linear_0", "network.output")
    elif isinstance(lo, Celo2):
        names = ("first_layer", "hidden", "output")
    else:
        raise TypeError(f"No PyLO layout for {type(lo).__name__}; supported: SmallFC, Celo2.")
    weights = lo.export_weights()
    out = {}
    for i, name in enumerate(names):
        out[f"{name}.weight"] = np.ascontiguousarray(weights[f"w{i}"].T, dtype=np.float32)
        out[f"{name}.bias"] = np.ascontiguousarray(weights[f"b{i}"], dtype=np.float32)
    return out


def _pylo_configs(lo: AbstractLearnedOptimizer) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(model constructor kwargs, optimizer constructor kwargs, PyLO optimizer class)."""
    hidden = int(lo.b0.shape[0])  # pyright: ignore
    if isinstance(lo, SmallFC):
        model = {"input_size": 39, "hidden_size": hidden, "hidden_layers": 1}
        optimizer = {
            "exp_mult": lo.exp_mult,
            "step_mult": lo.step_mult,
            "init_lr": lo.init_lr,
            "warmup_fraction": lo.warmup_fraction,
            "warmup_steps": lo.warmup_steps,
            "use_lo_cosine_scheduler": lo.use_cosine_schedule,
            "step_mult_min": lo.step_mult_min,
            "weight_decay": lo.weight_decay,
            "hidden_size": hidden,
            "hidden_layers": 1,
            "initial_momentum_decays": list(lo.momentum_decays),
            "initial_rms_decays": list(lo.rms_decays),
            "initial_adafactor_decays": list(lo.adafactor_decays),
            "clip_grad": lo.clip_grad,
            "clip_norm": lo.clip_norm,
        }
        return model, optimizer, "ELO_naive"
    assert isinstance(lo, Celo2)
    model = {"hidden_size": hidden, "output_size": 3}
    optimizer = optimizer_spec(lo)["hyperparameters"]
    return model, optimizer, "ELO_CELO2_naive"


def export_pylo(path: str | os.PathLike, lo: AbstractLearnedOptimizer) -> Path:
    """Write a learned optimizer's weights for PyTorch, in PyLO's layout (safetensors).

    The tensors are exactly the `state_dict` of PyLO's meta-model (see
    [`elo.pylo_state_dict`][]), so `model.load_state_dict(...)` is strict-compatible.
    The optimizer's hyperparameters travel as safetensors metadata (string values, JSON-encoded):
    `pylo_model` and `model_config` (the meta-model's constructor arguments), `pylo_optimizer`
    and `optimizer_config` (the constructor arguments of PyLO's optimizer, e.g. `ELO_naive`'s
    `initial_momentum_decays`, `initial_rms_decays`, `initial_adafactor_decays`, `step_mult`,
    ...), and `momentum_decays`, `rms_decays`, `adafactor_decays` (the accumulator decays; they
    are fixed in ELO, so PyLO's learned decay offsets of `AdafacLO` are zero).

    If `path` ends in `.safetensors` that file is written. Otherwise `path` is a directory that
    receives `model.safetensors` and `config.json` (the model's constructor arguments), the
    layout of Hugging Face's `PyTorchModelHubMixin`, so
    `MetaMLP.from_pretrained(path)` works.

    **Arguments:**

    - `path`: a `.safetensors` file or a directory.
    - `lo`: a [`elo.SmallFC`][] or [`elo.Celo2`][].

    **Returns:**

    The path of the `.safetensors` file written.

    !!! example

        ```python
        elo.export_pylo("exported/", lo)
        # then, in PyTorch:
        #   from pylo.models.Meta_MLP import MetaMLP
        #   from pylo.optim import ELO_naive
        #   net = MetaMLP.from_pretrained("exported/")
        #   opt = ELO_naive(model.parameters(), num_steps=10_000, network=net, hf_key=None)
        ```
    """
    tensors = pylo_state_dict(lo)
    model, optimizer, pylo_optimizer = _pylo_configs(lo)
    metadata = {
        "format": "pylo",
        "exporter": "elo",
        "elo_class": type(lo).__name__,
        "pylo_model": "MetaMLP" if isinstance(lo, SmallFC) else "Celo2MLP",
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
