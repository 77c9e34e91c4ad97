"""Save and load meta-training runs: `elo.save`, `elo.load`.

A checkpoint is one file: a JSON header on the first line, then the payload, the leaves of the
state written by `eqx.tree_serialise_leaves`. The header carries the format version, the run's
[`elo.MetaConfig`][] as a dict, the outer step, the learned optimizer's class and
hyperparameters, the byte length of each payload section and the SHA-256 of the payload, which
`load` verifies. Files are written atomically (a temporary file in the same directory, flushed
and fsync'ed, then renamed over the target), so a process killed at any moment leaves either the
old file or the new one, never a torn one.
"""

import contextlib
import dataclasses
import hashlib
import inspect
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ._config import MetaConfig
from ._mesh import particle_mesh, place
from ._state import MetaState
from .optimizers import Celo2, SmallFC
from .optimizers._base import AbstractLearnedOptimizer


CHECKPOINT_FORMAT = "elo-checkpoint"
# Version 2: `Metrics.diverged` / `nonfinite_grads` and `Particle.steps_over_bound`. A version-1
# checkpoint cannot resume a run, but its learned-optimizer section is unchanged and still loads.
CHECKPOINT_VERSION = 2
OPTIMIZER_FORMAT = "elo-optimizer"
OPTIMIZER_VERSION = 1
_READABLE_VERSIONS = {
    CHECKPOINT_FORMAT: (CHECKPOINT_VERSION,),
    OPTIMIZER_FORMAT: (OPTIMIZER_VERSION,),
}
# Fields that may differ between a checkpoint and the run loading it: where the data live and
# how many devices the particles are sharded over change neither shapes nor the algorithm.
PORTABLE_FIELDS = ("data_dir", "num_devices")
_MAX_HEADER_BYTES = 1 << 20
_OPTIMIZER_CLASSES: dict[str, type[AbstractLearnedOptimizer]] = {
    "SmallFC": SmallFC,
    "Celo2": Celo2,
}


class CheckpointError(ValueError):
    """A checkpoint or exported-optimizer file that cannot be used: missing, unreadable, corrupt,
    of another format or version, or written for an incompatible configuration."""


# ------------------------------------------------------------------------------------------------
# Files: atomic writes and the "JSON header line + payload" framing shared with `_export.py`.


def atomic_write(path: str | os.PathLike, parts: Iterable[bytes]) -> None:
    """Write `parts` to `path` atomically: temporary file in the same directory, flush, fsync,
    `os.replace`, then fsync the directory so that the rename itself is durable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make every file private
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_stale_temporaries(path: str | os.PathLike) -> None:
    """Delete temporary files that [`atomic_write`][] left next to `path` when a process was
    killed mid-write."""
    path = Path(path)
    if path.parent.is_dir():
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()


def write_framed(path: str | os.PathLike, header: dict[str, Any], sections: list[bytes]) -> None:
    """Write a JSON header line (with `sections` lengths and the payload's SHA-256) and the
    concatenated sections, atomically."""
    digest = hashlib.sha256()
    for section in sections:
        digest.update(section)
    header = dict(header, sections=[len(s) for s in sections], sha256=digest.hexdigest())
    line = json.dumps(header, sort_keys=True, allow_nan=False).encode() + b"\n"
    atomic_write(path, [line, *sections])


def read_framed(
    path: str | os.PathLike,
    *,
    expected_format: str | tuple[str, ...],
    what: str,
    versions: dict[str, tuple[int, ...]] | None = None,
) -> tuple[dict[str, Any], list[bytes]]:
    """Read and verify a file written by [`write_framed`][]; every failure is a
    [`CheckpointError`][] with a one-line message. `versions` maps each format to the versions
    accepted (default: the current one)."""
    path = Path(path)
    formats = (expected_format,) if isinstance(expected_format, str) else expected_format
    if path.is_dir():
        raise CheckpointError(f"{what} {path} is a directory, not a file.")
    try:
        with open(path, "rb") as f:
            line = f.readline(_MAX_HEADER_BYTES)
            payload = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"{what} {path} does not exist.") from None
    except OSError as e:
        raise CheckpointError(f"{what} {path} cannot be read: {e.strerror or e}.") from None
    try:
        if not line.endswith(b"\n"):
            raise ValueError
        header = json.loads(line)
        if not isinstance(header, dict):
            raise ValueError
    except ValueError:
        raise CheckpointError(
            f"{what} {path} is not an elo file (no JSON header line); it is corrupt or of "
            "another format."
        ) from None
    if header.get("format") not in formats:
        raise CheckpointError(
            f"{what} {path} has format {header.get('format')!r}; expected "
            f"{' or '.join(repr(f) for f in formats)}."
        )
    version = header.get("version")
    accepted = (versions or _READABLE_VERSIONS)[header["format"]]
    if version not in accepted:
        hint = ""
        if header["format"] == CHECKPOINT_FORMAT:
            hint = (
                " An older checkpoint cannot resume its run with this elo, but its learned "
                "optimizer still loads (elo.load_optimizer, elo evaluate, elo export); start a "
                "new run directory to meta-train again."
            )
        raise CheckpointError(
            f"{what} {path} has format version {version!r}; this elo reads version "
            f"{' or '.join(map(str, accepted))}.{hint}"
        )
    lengths = header.get("sections")
    if (
        not isinstance(lengths, list)
        or not all(isinstance(n, int) and n >= 0 for n in lengths)
        or sum(lengths) != len(payload)
    ):
        raise CheckpointError(
            f"{what} {path} is truncated or corrupt: its payload has {len(payload)} bytes, the "
            f"header announces {lengths}."
        )
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{what} {path} is corrupt: the payload's SHA-256 does not match.")
    sections, start = [], 0
    for n in lengths:
        sections.append(payload[start : start + n])
        start += n
    return header, sections


# ------------------------------------------------------------------------------------------------
# Learned optimizers as (class name, hyperparameters) + array leaves.


def optimizer_spec(lo: AbstractLearnedOptimizer) -> dict[str, Any]:
    """The learned optimizer's class and constructor hyperparameters, JSON-serialisable."""
    name = type(lo).__name__
    if name not in _OPTIMIZER_CLASSES:
        raise CheckpointError(
            f"Cannot save a learned optimizer of type {name}; supported: "
            f"{', '.join(_OPTIMIZER_CLASSES)}."
        )
    accepted = inspect.signature(type(lo).__init__).parameters
    hyper: dict[str, Any] = {"hidden_size": int(lo.b0.shape[0])}  # pyright: ignore
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


def serialise(tree: Any) -> bytes:
    """`eqx.tree_serialise_leaves` into bytes."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, tree)
    return buffer.getvalue()


def deserialise(data: bytes, like: Any, *, what: str) -> Any:
    """`eqx.tree_deserialise_leaves` from bytes, checking every array's shape and dtype against
    `like`."""

    def load_leaf(f, x):
        if isinstance(x, jax.Array | jax.ShapeDtypeStruct | np.ndarray):
            value = np.load(f)
            if value.shape != x.shape or value.dtype != x.dtype:
                raise CheckpointError(
                    f"{what} does not match this run: an array of shape {value.shape} and "
                    f"dtype {value.dtype} was saved where {x.shape} {x.dtype} is expected."
                )
            return value if isinstance(x, np.ndarray) else jnp.asarray(value)
        return eqx.default_deserialise_filter_spec(f, x)

    buffer = io.BytesIO(data)
    try:
        out = eqx.tree_deserialise_leaves(buffer, like, filter_spec=load_leaf)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001  (numpy raises several types on bad bytes)
        raise CheckpointError(f"{what} is corrupt or does not match this run ({e}).") from None
    if buffer.tell() != len(data):
        raise CheckpointError(
            f"{what} does not match this run: it holds more data than the state has leaves."
        )
    return out


# ------------------------------------------------------------------------------------------------
# MetaState checkpoints.


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


def load_checkpoint_optimizer(path: str | os.PathLike) -> AbstractLearnedOptimizer:
    """The learned optimizer stored in a checkpoint, without building the run's tasks."""
    framed = read_framed(
        path,
        expected_format=CHECKPOINT_FORMAT,
        what="Checkpoint",
        versions={CHECKPOINT_FORMAT: (1, CHECKPOINT_VERSION)},
    )
    header, (lo_bytes, _) = _two_sections(framed, path)
    what = f"Checkpoint {path}"
    like = optimizer_from_spec(header.get("optimizer") or {}, what=what)
    return deserialise(lo_bytes, like, what=what)
