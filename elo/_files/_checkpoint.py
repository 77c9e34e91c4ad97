"""Save and load meta-training runs: `elo.save`, `elo.load`.

A checkpoint is one file: a JSON header on the first line, then the payload, the leaves of the
state written by `eqx.tree_serialise_leaves`. The header carries the format version, the run's
[`elo.MetaConfig`][] as a dict, the outer step, the learned optimizer's class and
hyperparameters, the byte length of each payload section and the SHA-256 of the payload, which
`load` verifies. Files are written atomically (a temporary file in the same directory, flushed
and fsync'ed, then renamed over the target), so a process killed at any moment leaves either the
old file or the new one, never a torn one.
"""

import os
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._config import MetaConfig
from .._outer._state import MetaState
from .._runtime._mesh import particle_mesh, place
from ._framing import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    CheckpointError,
    deserialise,
    read_framed,
    serialise,
    write_framed,
)
from ._optimizer_file import optimizer_spec


# Fields that may differ between a checkpoint and the run loading it: where the data live and
# how many devices the particles are sharded over change neither shapes nor the algorithm.
PORTABLE_FIELDS = ("data_dir", "num_devices")


def _host(tree: Any) -> Any:
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.device_get(tree)


def config_differences(saved: Mapping[str, Any], current: MetaConfig) -> list[str]:
    """`"field: saved vs current"` for every field (outside `PORTABLE_FIELDS`) that differs."""
    now = current.to_dict()
    out = []
    for name in sorted(set(saved) | set(now)):
        if name in PORTABLE_FIELDS:
            continue
        if saved.get(name, "<missing>") != now.get(name, "<missing>"):
            out.append(
                f"{name}: {saved.get(name, '<missing>')!r} (checkpoint) vs "
                f"{now.get(name, '<missing>')!r} (this run)"
            )
    return out


def save(path: str | os.PathLike, state: MetaState) -> None:
    """Save a meta-training run's state to a checkpoint file.

    The file holds everything needed to continue the run except the task data: the learned
    optimizer, the meta-optimizer state, every particle (inner problems, accumulators, resume
    buffers), the outer step and the last metrics, plus a JSON header with the configuration and
    a SHA-256 checksum. The write is atomic: a process killed during `save` leaves the previous
    file intact. In a multi-process run every process must call `save` (the arrays are gathered)
    and only process 0 writes.

    **Arguments:**

    - `path`: the file to write (parent directories are created). By convention it ends in
      `.eqx`.
    - `state`: the [`elo.MetaState`][] to save.

    **Returns:**

    Nothing.

    !!! example

        ```python
        elo.save("run/checkpoint.eqx", state)
        state = elo.load("run/checkpoint.eqx", like=elo.init(config, key=key))
        ```
    """
    if not isinstance(state, MetaState):
        raise TypeError(f"elo.save expects an elo.MetaState, got {type(state).__name__}.")
    lo, rest = _host(
        (
            state.learned_optimizer,
            (state.meta_opt_state, state.groups, state.step, state.metrics),
        )
    )
    if jax.process_index() != 0:
        return
    header = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": int(np.asarray(rest[2])),
        "config": state.config.to_dict(),
        "optimizer": optimizer_spec(state.learned_optimizer),
    }
    write_framed(path, header, [serialise(lo), serialise(rest)])


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, Any], list[bytes]]:
    """The verified header and payload sections of a checkpoint (raises [`CheckpointError`][])."""
    return read_framed(path, expected_format=CHECKPOINT_FORMAT, what="Checkpoint")


def load(path: str | os.PathLike, *, like: MetaState) -> MetaState:
    """Load a meta-training run's state saved by [`elo.save`][].

    The task data are not in the file: `like` (a state from [`elo.init`][] with the same
    configuration) provides them and the structure of every array. The loaded arrays are placed
    on the device mesh exactly as `elo.init` places them, so [`elo.meta_step`][] runs on the
    loaded state without recompiling, and continuing a loaded run reproduces the uninterrupted
    run bit for bit.

    **Arguments:**

    - `path`: a checkpoint file written by [`elo.save`][].
    - `like`: a state of a run with the same configuration; only `data_dir` and `num_devices`
      may differ.

    **Returns:**

    The saved [`elo.MetaState`][], with `like`'s configuration and inner problems.

    **Raises:**

    `elo.CheckpointError` (a `ValueError`) if the file is missing, unreadable, truncated, fails
    its checksum, has another format version, or was written for a different configuration
    (the message names the differing fields).
    """
    if not isinstance(like, MetaState):
        raise TypeError(f"elo.load(like=...) expects an elo.MetaState, got {type(like).__name__}.")
    header, (lo_bytes, rest_bytes) = _two_sections(read_checkpoint(path), path)
    saved = header.get("config")
    if not isinstance(saved, dict):
        raise CheckpointError(f"Checkpoint {path} has no configuration in its header.")
    differences = config_differences(saved, like.config)
    if differences:
        raise CheckpointError(
            f"Checkpoint {path} was written for a different configuration: "
            + "; ".join(differences)
            + ". Use a new run directory, or the checkpoint's settings."
        )
    what = f"Checkpoint {path}"
    lo = deserialise(lo_bytes, like.learned_optimizer, what=what)
    meta_opt_state, groups, step, metrics = deserialise(
        rest_bytes, (like.meta_opt_state, like.groups, like.step, like.metrics), what=what
    )
    mesh = particle_mesh(like.config)
    theta, lo_static = eqx.partition(lo, eqx.is_inexact_array)
    groups = tuple(place(group, mesh, sharded=True) for group in groups)
    theta, meta_opt_state, step, metrics = place(
        (theta, meta_opt_state, step, metrics), mesh, sharded=False
    )
    return MetaState(
        config=like.config,
        learned_optimizer=eqx.combine(theta, lo_static),
        meta_opt_state=meta_opt_state,
        groups=groups,
        problems=like.problems,
        step=step,
        metrics=metrics,
    )


def _two_sections(
    framed: tuple[dict[str, Any], list[bytes]], path: str | os.PathLike
) -> tuple[dict[str, Any], list[bytes]]:
    header, sections = framed
    if len(sections) != 2:
        raise CheckpointError(f"Checkpoint {path} has {len(sections)} sections; expected 2.")
    return header, sections
