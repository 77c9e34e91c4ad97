"""Learned optimizers on their own: the plain `.eqx` file of `save_optimizer` / `load_optimizer`.

An optimizer file, like a checkpoint's header, describes the learned optimizer as its class
name and constructor hyperparameters (`optimizer_spec`); the weights follow as array leaves.
PyLO's PyTorch layout is in `_pylo.py`.
"""

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.random as jr

from ..optimizers._base import AbstractLearnedOptimizer
from ..optimizers._mlp_optimizer import AbstractMLPOptimizer
from ..optimizers._registry import LEARNED_OPTIMIZERS
from ._framing import (
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


# Learned-optimizer classes by class name, as file headers record them.
_OPTIMIZER_CLASSES: dict[str, Any] = {cls.__name__: cls for cls in LEARNED_OPTIMIZERS.values()}


def optimizer_spec(lo: AbstractLearnedOptimizer) -> dict[str, Any]:
    """The learned optimizer's class and constructor hyperparameters, JSON-serialisable."""
    name = type(lo).__name__
    if name not in _OPTIMIZER_CLASSES or not isinstance(lo, AbstractMLPOptimizer):
        raise CheckpointError(
            f"Cannot save a learned optimizer of type {name}; supported: "
            f"{', '.join(_OPTIMIZER_CLASSES)}."
        )
    hyper = {k: list(v) if isinstance(v, tuple) else v for k, v in lo.hyperparameters().items()}
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
