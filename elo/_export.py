"""Learned optimizers on their own: the plain `.eqx` file of `save_optimizer` / `load_optimizer`.

PyLO's PyTorch layout is in `_pylo.py`."""

import os
from pathlib import Path

from ._checkpoint import load_checkpoint_optimizer, optimizer_from_spec, optimizer_spec
from ._io import (
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
