"""Image-classification data for the inner problems: parquet on disk, device arrays in memory."""

import functools
import os
import tempfile
from pathlib import Path
from typing import Literal, TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from jaxtyping import Array, Float, Int32, UInt8

from .._checks import is_int_at_least
from .._custom_types import PRNGKeyArray


SplitName: TypeAlias = Literal["train", "validation", "test"]

NUM_CLASSES = 10
"""The number of classes of the shipped datasets (MNIST, Fashion-MNIST, CIFAR-10, SVHN); other
datasets ([`elo.tasks.image_dataset`][]) may have any number."""

# Task-name dataset -> directory prefix; the directory is `{prefix}_{H}x{W}`.
_DATASET_DIRS = {
    "mnist": "mnist",
    "fashionmnist": "fashion_mnist",
    "cifar10": "cifar10",
    "svhn": "svhn",
}
# Per-channel (mean, std) applied after /255, as in the reference (`tasks.py:_image_map_fn`).
# Datasets not listed are only divided by 255.
_CHANNEL_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
_SPLITS = ("train", "validation", "test")
_REQUIRED_METADATA = ("height", "width", "channels")
_EMBEDDED_DATA_DIR = Path(__file__).resolve().parent.parent / "data"
_ENV_VAR = "ELO_DATA_DIR"

_FORMAT_HELP = (
    "Expected format: a directory '<dataset>_<H>x<W>' (e.g. 'mnist_8x8') holding 'train.parquet' "
    "and 'test.parquet'. Each file has the columns\n"
    "  image: fixed_size_list<uint8>[H*W*C], un-normalised pixels 0..255 in HWC order,\n"
    "  label: an integer type, values 0..9,\n"
    "and the schema metadata (key/value strings) 'height', 'width', 'channels' (and optionally "
    "'layout'='HWC'). See elo/data/PROVENANCE.md for how the shipped files were made."
)


def known_datasets() -> tuple[str, ...]:
    """The dataset names accepted in image-task names.

    **Returns:**

    A tuple of names such as `"mnist"` and `"cifar10"`.
    """
    return tuple(_DATASET_DIRS)


class ImageSplit(eqx.Module):
    """One split of an image-classification dataset, held as device arrays.

    `uint8` images stay `uint8` on the device (a quarter of the memory of float32) and are
    converted after a minibatch is gathered; see [`elo.tasks.ImageDataset.preprocess`][].

    **Arguments:**

    - `images`: `uint8` pixels (0..255) or floating-point values of shape `(n, H*W*C)`, each
      row in HWC order.
    - `labels`: `int32` class labels of shape `(n,)`.
    """

    images: UInt8[Array, "n d"] | Float[Array, "n d"]
    labels: Int32[Array, " n"]

    def __check_init__(self):
        if self.images.shape[0] < 1:
            raise ValueError("ImageSplit needs at least one example; got images of shape (0, ...).")
        if self.images.dtype != jnp.uint8 and not jnp.issubdtype(self.images.dtype, jnp.floating):
            raise ValueError(
                f"ImageSplit.images must be uint8 or floating-point, got {self.images.dtype}."
            )

    @property
    def num_examples(self) -> int:
        """The number of examples `n` in the split."""
        return self.images.shape[0]

    def sample(
        self, key: PRNGKeyArray, batch_size: int
    ) -> tuple[UInt8[Array, "b d"] | Float[Array, "b d"], Int32[Array, " b"]]:
        """Gather a uniformly random minibatch, in-graph.

        Indices are drawn independently and uniformly *with* replacement. (The reference draws
        one permutation per fetch, i.e. without replacement within it; for a batch of 64 out of
        at least tens of thousands of rows the two are practically the same distribution.)

        **Arguments:**

        - `key`: selects the minibatch.
        - `batch_size`: the number of examples.

        **Returns:**

        `(images, labels)` with shapes `(batch_size, H*W*C)` (as stored) and `(batch_size,)`.
        """
        index = jax.random.randint(key, (batch_size,), 0, self.num_examples)
        return self.images[index], self.labels[index]


class ImageDataset(eqx.Module):
    """An image-classification dataset: train, validation and test splits plus its preprocessing.

    Build it with [`elo.tasks.load_image_dataset`][] (the shipped files: the splits are `train` =
    the first 80% of the train file, `validation` = the remaining 20%, `test` = the test file) or
    with [`elo.tasks.image_dataset`][] (any `datasets.DatasetDict`).

    **Arguments:**

    - `train`, `validation`, `test`: the three [`elo.tasks.ImageSplit`][]s.
    - `name`: the dataset's name as used in task names (e.g. `"cifar10"`).
    - `height`, `width`, `channels`: the image shape; rows are stored flattened in HWC order.
    - `mean`, `std`: optional per-channel statistics; after dividing by 255 (`uint8` images) the
      pixels are standardised as $(x - \\mu_c)/\\sigma_c$. `None` means no standardisation.
    - `num_classes`: the number of classes (at least 2; default 10); labels are in
      `0..num_classes-1`.
    """

    train: ImageSplit
    validation: ImageSplit
    test: ImageSplit
    name: str = eqx.field(static=True)
    height: int = eqx.field(static=True)
    width: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)
    mean: tuple[float, ...] | None = eqx.field(static=True, default=None)
    std: tuple[float, ...] | None = eqx.field(static=True, default=None)
    num_classes: int = eqx.field(static=True, default=NUM_CLASSES)

    def __check_init__(self):
        if not is_int_at_least(self.num_classes, 2):
            raise ValueError(
                f"ImageDataset.num_classes must be an integer >= 2, got {self.num_classes!r}."
            )
        dtypes = {getattr(self, split).images.dtype for split in _SPLITS}
        if len(dtypes) > 1:
            raise ValueError(
                f"ImageDataset splits hold images of different dtypes {sorted(map(str, dtypes))}; "
                "give every split the same dtype."
            )
        for field, value in (("height", self.height), ("width", self.width)):
            if value < 1:
                raise ValueError(f"ImageDataset.{field} must be positive, got {value}.")
        if self.channels < 1:
            raise ValueError(f"ImageDataset.channels must be positive, got {self.channels}.")
        for split in _SPLITS:
            size = getattr(self, split).images.shape[1]
            if size != self.input_dim:
                raise ValueError(
                    f"ImageDataset.{split} has images of length {size}, but "
                    f"height*width*channels = {self.height}*{self.width}*{self.channels} = "
                    f"{self.input_dim}."
                )
        if (self.mean is None) != (self.std is None):
            raise ValueError("ImageDataset.mean and ImageDataset.std must be given together.")
        if self.mean is not None and self.std is not None:
            if len(self.mean) != self.channels or len(self.std) != self.channels:
                raise ValueError(
                    f"ImageDataset.mean and .std need one value per channel ({self.channels}), "
                    f"got {len(self.mean)} and {len(self.std)}."
                )
            if not all(s > 0 for s in self.std):
                raise ValueError(f"ImageDataset.std must be positive, got {self.std}.")

    @property
    def input_dim(self) -> int:
        """The flattened image size `height * width * channels`."""
        return self.height * self.width * self.channels

    def split(self, name: SplitName) -> ImageSplit:
        """Return the split called `name`.

        **Arguments:**

        - `name`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        The [`elo.tasks.ImageSplit`][].
        """
        if name not in _SPLITS:
            raise ValueError(f"Unknown split {name!r}; expected one of {_SPLITS}.")
        return getattr(self, name)

    def preprocess(
        self, images: UInt8[Array, "*batch d"] | Float[Array, "*batch d"]
    ) -> Float[Array, "*batch d"]:
        """Convert stored pixels to the network input.

        Divides `uint8` pixels by 255 (floating-point images are taken as they are) and, where
        the dataset has channel statistics (CIFAR-10), standardises each channel. Channels are
        the fastest-varying axis of a flattened HWC row.

        **Arguments:**

        - `images`: rows of length `H*W*C` as stored, with any leading batch shape.

        **Returns:**

        float32 inputs of the same shape.
        """
        x = images.astype(jnp.float32)
        if images.dtype == jnp.uint8:
            x = x / 255.0
        if self.mean is None or self.std is None:
            return x
        pixels = self.height * self.width
        mean = np.tile(np.asarray(self.mean, np.float32), pixels)
        std = np.tile(np.asarray(self.std, np.float32), pixels)
        shape = (1,) * (x.ndim - 1) + (self.input_dim,)
        return (x - jnp.asarray(mean).reshape(shape)) / jnp.asarray(std).reshape(shape)

    def sample(
        self, key: PRNGKeyArray, batch_size: int, split: SplitName = "train"
    ) -> tuple[Float[Array, "b d"], Int32[Array, " b"]]:
        """Gather a preprocessed random minibatch from a split, in-graph.

        **Arguments:**

        - `key`: selects the minibatch.
        - `batch_size`: the number of examples.
        - `split`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        `(inputs, labels)`: float32 inputs of shape `(batch_size, H*W*C)` and int32 labels.
        """
        images, labels = self.split(split).sample(key, batch_size)
        return self.preprocess(images), labels


def _dataset_dirname(dataset: str, height: int, width: int) -> str:
    return f"{_DATASET_DIRS[dataset]}_{height}x{width}"


def _search_roots(data_dir: str | os.PathLike | None) -> list[tuple[str, Path]]:
    roots = []
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise ValueError(f"data_dir={os.fspath(data_dir)!r} is not a directory.")
        roots.append(("data_dir argument", path))
    env = os.environ.get(_ENV_VAR)
    if env:
        roots.append((f"${_ENV_VAR}", Path(env).expanduser()))
    roots.append(("embedded copy", _EMBEDDED_DATA_DIR))
    return roots


class MissingDataError(FileNotFoundError, ValueError):
    """A data file that a task needs was not found in any of the searched places."""


def _resolve_files(
    dataset: str, height: int, width: int, data_dir: str | os.PathLike | None
) -> dict[str, Path]:
    dirname = _dataset_dirname(dataset, height, width)
    roots = _search_roots(data_dir)
    found = next(((label, root) for label, root in roots if (root / dirname).is_dir()), None)
    files = {"train": "train.parquet", "test": "test.parquet"}
    if found is None:
        looked = "\n".join(
            f"  - {root / dirname / files['train']} ({label})" for label, root in roots
        )
        raise MissingDataError(
            f"Missing data file '{dirname}/{files['train']}' for dataset {dataset!r} at "
            f"{height}x{width}: no directory '{dirname}' in any searched place. Looked for:\n"
            f"{looked}\nPass data_dir=... or set ${_ENV_VAR} to a directory holding "
            f"'{dirname}/'.\n{_FORMAT_HELP}"
        )
    label, root = found
    paths = {split: root / dirname / name for split, name in files.items()}
    for split, path in paths.items():
        if not path.is_file():
            others = "\n".join(
                f"  - {r / dirname / files[split]} ({lab}){' <- used' if r == root else ''}"
                for lab, r in roots
            )
            raise MissingDataError(
                f"Missing data file '{dirname}/{files[split]}' for dataset {dataset!r}: "
                f"the directory {root / dirname} ({label}, the first place holding '{dirname}') "
                f"has no '{files[split]}'. Search order:\n{others}\n{_FORMAT_HELP}"
            )
    return paths


def _read_table(path: Path) -> pa.Table:
    """Read a parquet file through HF `datasets`, in memory, with a throw-away cache dir."""
    import datasets  # here, not at the top: it is a third of `import elo`'s time

    # Progress bars are silenced for the read only (a task build should not print), and the
    # caller's setting is restored.
    bars_were_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        # `keep_in_memory` gives an in-memory table, so the temporary Arrow cache that the
        # parquet builder writes can be deleted at once; nothing is written next to the data
        # (which may be the read-only package directory) or into ~/.cache.
        with tempfile.TemporaryDirectory(prefix="elo-datasets-") as cache_dir:
            ds = datasets.Dataset.from_parquet(
                os.fspath(path), cache_dir=cache_dir, keep_in_memory=True
            )
            return ds.with_format("arrow")[:]
    finally:
        if not bars_were_disabled:
            datasets.enable_progress_bars()


def _read_split_file(
    path: Path, height: int, width: int, channels: int
) -> tuple[np.ndarray, np.ndarray]:
    where = f"Data file {path}"
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{where} is not a readable parquet file ({e}).\n{_FORMAT_HELP}") from e
    metadata = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    missing = [k for k in _REQUIRED_METADATA if k not in metadata]
    if missing:
        raise ValueError(
            f"{where} lacks the schema metadata key(s) {missing}; found {sorted(metadata)}.\n"
            f"{_FORMAT_HELP}"
        )
    try:
        shape = tuple(int(metadata[k]) for k in _REQUIRED_METADATA)
    except ValueError as e:
        raise ValueError(
            f"{where} has non-integer height/width/channels metadata "
            f"{[metadata[k] for k in _REQUIRED_METADATA]}.\n{_FORMAT_HELP}"
        ) from e
    if shape != (height, width, channels):
        raise ValueError(
            f"{where} holds {shape[0]}x{shape[1]}x{shape[2]} images (schema metadata "
            f"height x width x channels), but {height}x{width}x{channels} were asked for."
        )
    layout = metadata.get("layout", "HWC")
    if layout != "HWC":
        raise ValueError(f"{where} has layout {layout!r}; only 'HWC' is supported.")
    for column in ("image", "label"):
        if column not in schema.names:
            raise ValueError(
                f"{where} has no {column!r} column; columns are {schema.names}.\n{_FORMAT_HELP}"
            )

    table = _read_table(path)
    num_rows = table.num_rows
    if num_rows == 0:
        raise ValueError(f"{where} has no rows.")
    size = height * width * channels
    image = table.column("image").combine_chunks()
    image_type = image.type
    if not (pa.types.is_fixed_size_list(image_type) or pa.types.is_list(image_type)) or (
        image_type.value_type != pa.uint8()
    ):
        raise ValueError(
            f"{where} has an 'image' column of type {image_type}; expected "
            f"fixed_size_list<uint8>[{size}].\n{_FORMAT_HELP}"
        )
    if image.null_count:
        raise ValueError(f"{where} has {image.null_count} null images.")
    # pyarrow's stubs lack most of `pyarrow.compute`, which is generated at import time.
    lengths = pc.list_value_length(image).to_numpy(  # pyright: ignore[reportAttributeAccessIssue]
        zero_copy_only=False
    )
    if np.any(lengths != size):
        bad = sorted(set(lengths[lengths != size].tolist()))
        raise ValueError(
            f"{where} has images of length {bad}, but {height}x{width}x{channels} images have "
            f"{size} values."
        )
    images = image.flatten().to_numpy(zero_copy_only=False).reshape(num_rows, size)

    label = table.column("label").combine_chunks()
    if not pa.types.is_integer(label.type):
        raise ValueError(
            f"{where} has a 'label' column of type {label.type}; expected integers 0..9."
        )
    if label.null_count:
        raise ValueError(f"{where} has {label.null_count} null labels.")
    labels = label.to_numpy(zero_copy_only=False).astype(np.int64)
    out_of_range = (labels < 0) | (labels >= NUM_CLASSES)
    if np.any(out_of_range):
        raise ValueError(
            f"{where} has {int(out_of_range.sum())} labels out of range 0..{NUM_CLASSES - 1} "
            f"(min {labels.min()}, max {labels.max()})."
        )

    images = np.array(images, dtype=np.uint8)
    labels = labels.astype(np.int32)
    images.setflags(write=False)
    labels.setflags(write=False)
    return images, labels


@functools.lru_cache(maxsize=16)
def _read_split_file_cached(
    path: str, mtime_ns: int, file_size: int, height: int, width: int, channels: int
) -> tuple[np.ndarray, np.ndarray]:
    del mtime_ns, file_size  # only part of the cache key: a rewritten file is read again
    return _read_split_file(Path(path), height, width, channels)


def _load_split_file(
    path: Path, height: int, width: int, channels: int
) -> tuple[np.ndarray, np.ndarray]:
    path = path.resolve()
    stat = path.stat()
    return _read_split_file_cached(
        os.fspath(path), stat.st_mtime_ns, stat.st_size, height, width, channels
    )


def load_image_dataset(
    dataset: str,
    height: int,
    width: int,
    channels: int,
    *,
    data_dir: str | os.PathLike | None = None,
) -> ImageDataset:
    """Load an image-classification dataset from parquet files into device arrays.

    The files are `{dir}/train.parquet` and `{dir}/test.parquet`, where `{dir}` is
    `mnist_{H}x{W}`, `fashion_mnist_{H}x{W}`, `cifar10_{H}x{W}` or `svhn_{H}x{W}`. The first of
    these places that holds `{dir}` is used:

    1. the `data_dir` argument;
    2. the directory in the environment variable `ELO_DATA_DIR`;
    3. the copy embedded in the package (`elo/data/`: MNIST, Fashion-MNIST and CIFAR-10 at 8x8).

    Files are read with HF `datasets` (parquet builder, in memory, with a temporary cache that is
    deleted at once) and checked against the requested shape: the schema metadata
    `height`/`width`/`channels` and the length of every `image` row, and labels in `0..9`.

    Splits: `train` is the first 80% of the train file, `validation` the remaining 20%, and
    `test` the test file, for every dataset. (The reference trains on 100% of the CIFAR-10 train
    split, and on 1% of SVHN's because of a bug; neither is reproduced.)

    Decoded files are cached in memory as host arrays, keyed by the resolved file path, its
    modification time and size, so building many tasks on one dataset reads each file once.

    **Arguments:**

    - `dataset`: one of `"mnist"`, `"fashionmnist"`, `"cifar10"`, `"svhn"`.
    - `height`, `width`, `channels`: the image shape the files must hold.
    - `data_dir`: an optional directory searched first.

    **Returns:**

    An [`elo.tasks.ImageDataset`][] whose arrays live on the default device.
    """
    if dataset not in _DATASET_DIRS:
        raise ValueError(f"Unknown dataset {dataset!r}; known datasets: {known_datasets()}.")
    for field, value in (("height", height), ("width", width), ("channels", channels)):
        if not is_int_at_least(value, 1):
            raise ValueError(f"`{field}` must be a positive integer, got {value!r}.")
    mean, std = _CHANNEL_STATS.get(dataset, (None, None))
    if mean is not None and len(mean) != channels:
        raise ValueError(
            f"Dataset {dataset!r} is standardised per channel with {len(mean)} channel "
            f"statistics, so it needs channels={len(mean)}, got {channels}."
        )
    paths = _resolve_files(dataset, height, width, data_dir)
    train_images, train_labels = _load_split_file(paths["train"], height, width, channels)
    test_images, test_labels = _load_split_file(paths["test"], height, width, channels)
    num_rows = train_images.shape[0]
    num_train = num_rows * 4 // 5
    if num_train < 1 or num_train == num_rows:
        raise ValueError(
            f"Data file {paths['train']} has {num_rows} row(s); at least 2 are needed so that "
            "the train (first 80%) and validation (last 20%) splits are both non-empty."
        )

    def split(images, labels):
        return ImageSplit(jnp.asarray(images), jnp.asarray(labels))

    return ImageDataset(
        train=split(train_images[:num_train], train_labels[:num_train]),
        validation=split(train_images[num_train:], train_labels[num_train:]),
        test=split(test_images, test_labels),
        name=dataset,
        height=height,
        width=width,
        channels=channels,
        mean=mean,
        std=std,
    )
