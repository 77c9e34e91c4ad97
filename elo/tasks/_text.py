"""Text for the language-model tasks: bytes on the device, with train / validation / test splits."""

import functools
import gzip
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, UInt8

from .._checks import is_int_at_least
from .._custom_types import PRNGKeyArray
from ._data import SplitName


_SPLITS = ("train", "validation", "test")
_EMBEDDED_TEXT_DIR = Path(__file__).resolve().parent.parent / "data"
_TEXT_DATASETS = ("shakespeare",)


def known_text_datasets() -> tuple[str, ...]:
    """The text datasets shipped with `elo` (accepted in language-model task names).

    **Returns:**

    A tuple of names, e.g. `("shakespeare",)`.
    """
    return _TEXT_DATASETS


class TextDataset(eqx.Module):
    """A text corpus as bytes (a byte-level vocabulary of 256 tokens), in three splits.

    **Arguments:**

    - `train`, `validation`, `test`: the splits' bytes, `uint8` arrays of shape `(n,)`.
    - `name`: the dataset's name in task names, e.g. `"shakespeare"`.
    """

    train: UInt8[Array, " n_train"]
    validation: UInt8[Array, " n_validation"]
    test: UInt8[Array, " n_test"]
    name: str = eqx.field(static=True)

    def __check_init__(self):
        for split in _SPLITS:
            value = getattr(self, split)
            if value.ndim != 1 or value.dtype != jnp.uint8:
                raise ValueError(
                    f"TextDataset.{split} must be a 1-D uint8 array of bytes, got "
                    f"{value.dtype}{list(value.shape)}."
                )

    def split(self, name: SplitName) -> UInt8[Array, " n"]:
        """The bytes of the split called `name`.

        **Arguments:**

        - `name`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        A `uint8` array.
        """
        if name not in _SPLITS:
            raise ValueError(f"Unknown split {name!r}; expected one of {_SPLITS}.")
        return getattr(self, name)

    def sample(
        self, key: PRNGKeyArray, batch_size: int, length: int, split: SplitName = "train"
    ) -> UInt8[Array, "b length"]:
        """Windows of `length` consecutive bytes at uniformly random offsets, in-graph.

        **Arguments:**

        - `key`: selects the offsets.
        - `batch_size`: the number of windows.
        - `length`: bytes per window (at most the split's length).
        - `split`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        A `uint8` array of shape `(batch_size, length)`.
        """
        data = self.split(split)
        if not (is_int_at_least(length, 1) and length <= data.shape[0]):
            raise ValueError(
                f"length must be an integer in 1..{data.shape[0]} (the {split} split's size), "
                f"got {length!r}."
            )
        starts = jax.random.randint(key, (batch_size, 1), 0, data.shape[0] - length + 1)
        return data[starts + jnp.arange(length)[None, :]]


@functools.lru_cache(maxsize=4)
def _read_split(path: Path) -> np.ndarray:
    try:
        data = np.frombuffer(gzip.decompress(path.read_bytes()), np.uint8)
    except (OSError, EOFError) as e:
        raise ValueError(f"Text file {path} is not readable gzip'd text ({e}).") from None
    if data.size < 2:
        raise ValueError(f"Text file {path} holds {data.size} byte(s); at least 2 are needed.")
    return data


def load_text_dataset(name: str = "shakespeare") -> TextDataset:
    """Load a text corpus shipped inside the package into device arrays.

    `"shakespeare"` is six plays of Shakespeare (public domain) as plain ASCII: Hamlet, King
    Lear, Othello and Romeo and Juliet for training (623 KB), Macbeth for validation (102 KB)
    and Julius Caesar for testing (114 KB); the source, licence and checksums are in
    `elo/data/shakespeare/PROVENANCE.md`. Nothing is downloaded.

    **Arguments:**

    - `name`: one of [`elo.tasks.known_text_datasets`][]`()`.

    **Returns:**

    A [`elo.tasks.TextDataset`][].
    """
    if name not in _TEXT_DATASETS:
        raise ValueError(f"Unknown text dataset {name!r}; shipped: {', '.join(_TEXT_DATASETS)}.")
    directory = _EMBEDDED_TEXT_DIR / name
    splits = {s: jnp.asarray(_read_split(directory / f"{s}.txt.gz")) for s in _SPLITS}
    return TextDataset(**splits, name=name)
