"""Read a PyTorch `state_dict` file (`torch.save`'s zip layout) without PyTorch and without
running arbitrary pickled code."""

import io
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from ._framing import CheckpointError


# The storage classes a tensor's pickle may name, by the element type they hold.
_STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _StorageType:
    """What the pickle's `torch.<X>Storage` global stands for: an element type, nothing more."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(_STORAGE_DTYPES[name])


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks, *metadata):
    del requires_grad, hooks, metadata
    if not isinstance(storage, np.ndarray):
        raise pickle.UnpicklingError("a tensor's storage is not a storage record")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if any(s < 0 for s in size + stride) or storage_offset < 0:
        raise pickle.UnpicklingError(f"negative size {size} or stride {stride}")
    if size and int(np.prod(size)) > 0:
        last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= storage.size:
            raise pickle.UnpicklingError(
                f"a tensor of size {size} and stride {stride} reaches past its storage of "
                f"{storage.size} elements"
            )
    item = storage.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[storage_offset:],
        shape=size,
        strides=tuple(s * item for s in stride),
        writeable=False,
    )
    return np.array(view)


def _rebuild_parameter(data, requires_grad, hooks, *state):
    del requires_grad, hooks, state
    return data


# module -> name -> what the pickle gets instead; nothing outside this table is ever resolved.
_ALLOWED = {
    "collections": {"OrderedDict": OrderedDict},
    "torch._utils": {
        "_rebuild_tensor_v2": _rebuild_tensor_v2,
        "_rebuild_parameter": _rebuild_parameter,
    },
    "torch": {name: _StorageType(name) for name in _STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, byteorder: str):
        super().__init__(io.BytesIO(data))
        self._archive, self._prefix, self._byteorder = archive, prefix, byteorder
        self._storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[module][name]
        except KeyError:
            raise pickle.UnpicklingError(
                f"it refers to {module}.{name}, which is neither a tensor, a storage nor an "
                "ordered dict"
            ) from None

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent record {pid!r:.80}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError("a storage record names no storage type")
        if key not in self._storages:
            try:
                raw = self._archive.read(f"{self._prefix}data/{key}")
            except KeyError:
                raise pickle.UnpicklingError(f"storage {key!r} is missing from the archive")
            dtype = storage_type.dtype.newbyteorder("<" if self._byteorder == "little" else ">")
            if len(raw) < int(numel) * dtype.itemsize:
                raise pickle.UnpicklingError(f"storage {key!r} is shorter than its {numel} items")
            self._storages[key] = np.frombuffer(raw, dtype, count=int(numel)).astype(
                storage_type.dtype
            )
        return self._storages[key]


def read_torch_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of a file written by `torch.save(state_dict, path)`, as numpy arrays.

    Only PyTorch's zip layout (the default since PyTorch 1.6) is read, and its pickle may name
    nothing but tensors, their storages and ordered dicts: any other object (a function, a
    class, a module) is refused before it is resolved, so a malicious file cannot run code.
    PyTorch itself is not needed.

    **Arguments:**

    - `path`: the `.pt` / `.pth` file.

    **Returns:**

    `{name: array}`, in the file's order.

    **Raises:**

    `elo.CheckpointError` (a `ValueError`) naming the file and the reason: missing, not a zip
    archive, a pickle naming anything but tensors, storages and ordered dicts, or not a
    mapping of names to tensors.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"PyTorch file {path} does not exist.")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path} is not a PyTorch zip archive (torch.save's format since PyTorch 1.6); "
            "save it again with a recent torch.save, or export it as safetensors."
        )
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if len(pickles) != 1:
                raise pickle.UnpicklingError(f"expected one data.pkl, found {len(pickles)}")
            prefix = pickles[0][: -len("data.pkl")]
            names = set(archive.namelist())
            byteorder = "little"
            if f"{prefix}byteorder" in names:
                byteorder = archive.read(f"{prefix}byteorder").decode().strip()
            if byteorder not in ("little", "big"):
                raise pickle.UnpicklingError(f"unknown byte order {byteorder!r}")
            value = _Unpickler(archive.read(pickles[0]), archive, prefix, byteorder).load()
    except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError) as e:
        raise CheckpointError(
            f"{path} is not a PyTorch state dict elo can read safely: {e}. Only tensors, "
            "storages and ordered dicts are accepted; nothing else is unpickled."
        ) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, np.ndarray) for k, v in value.items()
    ):
        raise CheckpointError(
            f"{path} holds a {type(value).__name__}, not a state dict of named tensors "
            "(torch.save(module.state_dict(), path) writes one)."
        )
    return dict(value)
