"""Read a flax msgpack file (`flax.serialization.to_bytes`), such as the Celo2 authors'
`theta.state`, without flax or msgpack."""

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ._framing import CheckpointError


# flax's msgpack extension codes (flax/serialization.py, `_MsgpackExtType`).
_EXT_NDARRAY = 1
_EXT_NPSCALAR = 3


class _Reader:
    """A msgpack decoder for the types flax writes: maps, arrays, strings, bytes, numbers,
    booleans, nil and flax's ndarray and numpy-scalar extensions."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError("the file ends in the middle of a value")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(">" + fmt, self.take(struct.calcsize(">" + fmt)))[0]

    def value(self) -> Any:
        b = self.unpack("B")
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0x80 <= b <= 0x8F:
            return self.mapping(b & 0x0F)
        if 0x90 <= b <= 0x9F:
            return [self.value() for _ in range(b & 0x0F)]
        if 0xA0 <= b <= 0xBF:
            return self.take(b & 0x1F).decode()
        fixed = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in fixed:
            return fixed[b]
        sized = {0xC4: "B", 0xC5: "H", 0xC6: "I"}  # bin 8/16/32
        if b in sized:
            return self.take(self.unpack(sized[b]))
        sized = {0xD9: "B", 0xDA: "H", 0xDB: "I"}  # str 8/16/32
        if b in sized:
            return self.take(self.unpack(sized[b])).decode()
        numbers = {0xCA: "f", 0xCB: "d", 0xCC: "B", 0xCD: "H", 0xCE: "I", 0xCF: "Q"}
        numbers |= {0xD0: "b", 0xD1: "h", 0xD2: "i", 0xD3: "q"}
        if b in numbers:
            return self.unpack(numbers[b])
        if b in (0xDC, 0xDD):
            return [self.value() for _ in range(self.unpack("H" if b == 0xDC else "I"))]
        if b in (0xDE, 0xDF):
            return self.mapping(self.unpack("H" if b == 0xDE else "I"))
        fixext = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
        if b in fixext:
            return self.extension(self.unpack("b"), self.take(fixext[b]))
        if b in (0xC7, 0xC8, 0xC9):
            size = self.unpack({0xC7: "B", 0xC8: "H", 0xC9: "I"}[b])
            return self.extension(self.unpack("b"), self.take(size))
        raise ValueError(f"byte 0x{b:02x} at offset {self.pos - 1} starts no msgpack value")

    def mapping(self, n: int) -> dict[Any, Any]:
        out = {}
        for _ in range(n):
            key = self.value()
            out[key] = self.value()
        return out

    def extension(self, code: int, payload: bytes) -> np.ndarray:
        if code not in (_EXT_NDARRAY, _EXT_NPSCALAR):
            raise ValueError(f"msgpack extension {code} is not one of flax's array types")
        inner = _Reader(payload)
        record = inner.value()
        if not (isinstance(record, list) and len(record) == 3):
            raise ValueError("an array record is not (shape, dtype, bytes)")
        shape, dtype, buffer = record
        if isinstance(dtype, bytes):
            dtype = dtype.decode()
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise ValueError(f"unknown array dtype {dtype!r}") from None
        if dtype.hasobject or not isinstance(buffer, bytes):
            raise ValueError(f"array of dtype {dtype} cannot be read")
        array = np.frombuffer(buffer, dtype).reshape(shape).copy()
        return array[()] if code == _EXT_NPSCALAR else array


def read_flax_msgpack(path: str | os.PathLike) -> dict[str, Any]:
    """The nested dict of arrays in a flax msgpack file, e.g. the Celo2 authors' `theta.state`.

    Reads what `flax.serialization.to_bytes` writes for a tree of dicts and numpy arrays
    (flax's state-dict layout), with neither flax nor msgpack installed; the arrays come back
    as numpy arrays.

    **Arguments:**

    - `path`: the file.

    **Returns:**

    The nested dict.

    **Raises:**

    `elo.CheckpointError` (a `ValueError`) naming the file and what is wrong with it.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointError(f"flax msgpack file {path} does not exist.")
    reader = _Reader(path.read_bytes())
    try:
        value = reader.value()
        if reader.pos != len(reader.data):
            raise ValueError(f"{len(reader.data) - reader.pos} bytes follow the value")
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        raise CheckpointError(
            f"{path} is not a flax msgpack file elo can read ({e}); it should be written by "
            "flax.serialization.to_bytes."
        ) from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} holds a {type(value).__name__}, not a dict of arrays.")
    return value
