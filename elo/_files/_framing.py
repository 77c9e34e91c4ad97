"""File I/O shared by checkpoints and exported optimizers: atomic writes, and the framing of
an `elo` file (one JSON header line with the format, version, section lengths and SHA-256, then
the payload sections written by `eqx.tree_serialise_leaves`)."""

import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


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
_MAX_HEADER_BYTES = 1 << 20


class CheckpointError(ValueError):
    """A checkpoint or exported-optimizer file that cannot be used: missing, unreadable, corrupt,
    of another format or version, or written for an incompatible configuration."""


# ------------------------------------------------------------------------------------------------
# Files: atomic writes and the "JSON header line + payload" framing of `_optimizer_file.py` too.


def atomic_write(path: str | os.PathLike, parts: Iterable[bytes]) -> None:
    """Write `parts` to `path` atomically: temporary file in the same directory, flush, fsync,
    `os.replace`, then fsync the directory so that the rename itself is durable. An `OSError`
    names `path`, never the temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise _naming(e, path) from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make every file private
        with os.fdopen(fd, "wb") as f:
            for part in parts:
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _naming(e, path) from None
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _naming(error: OSError, path: Path) -> OSError:
    """`error` about `path`: the temporary file is an implementation detail the user never
    asked for."""
    if error.errno is None:
        return error
    return OSError(error.errno, error.strerror, os.fspath(path))


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
