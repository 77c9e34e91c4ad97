"""Task data from Hugging Face `datasets`: columns converted once to arrays, three splits."""

from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._checks import is_int_at_least
from ._data import ImageDataset, ImageSplit
from ._model_task import SPLITS


def _columns(split: Any, where: str, columns: Sequence[str] | None) -> dict[str, np.ndarray]:
    import datasets  # here, not at the top: it is a third of `import elo`'s time

    if not isinstance(split, datasets.Dataset):
        raise ValueError(f"{where} must be a datasets.Dataset, got {type(split).__name__}.")
    names = list(split.column_names if columns is None else columns)
    missing = [c for c in names if c not in split.column_names]
    if missing:
        raise ValueError(
            f"{where} has no column(s) {missing}; its columns are {split.column_names}."
        )
    if split.num_rows < 1:
        raise ValueError(f"{where} has no rows.")
    table = split.with_format("numpy", columns=names)[:]
    out = {}
    for name in names:
        array = np.asarray(table[name])
        if array.dtype == object:
            raise ValueError(
                f"{where} column {name!r} holds values of different shapes (or non-numeric "
                "values); every row must have the same shape, e.g. resize the images first."
            )
        out[name] = array
    return out


def dataset_splits(
    dataset: Mapping[str, Any],
    *,
    columns: Sequence[str] | None = None,
    validation_fraction: float = 0.2,
) -> dict[str, dict[str, np.ndarray]]:
    """The columns of a `datasets.DatasetDict` as numpy arrays, in train / validation / test
    splits: the data of an [`elo.tasks.ModelTask`][].

    Every column is converted once (`with_format("numpy")`), so rows must have one shape per
    column. Without a `"validation"` split, the last `validation_fraction` of the train rows
    become the validation split (as for the shipped datasets).

    **Arguments:**

    - `dataset`: a `datasets.DatasetDict` (or a dict of `datasets.Dataset`) with `"train"` and
      `"test"` splits and optionally `"validation"`; e.g.
      `datasets.Dataset.from_dict(...).train_test_split(test_size=0.2)`.
    - `columns`: the columns to convert (default: all).
    - `validation_fraction`: in $(0, 1)$, used when there is no validation split.

    **Returns:**

    `{"train": {column: array}, "validation": {...}, "test": {...}}`.
    """
    if not isinstance(dataset, Mapping):
        raise ValueError(
            f"dataset must be a datasets.DatasetDict with 'train' and 'test' splits, got "
            f"{type(dataset).__name__}; split a single Dataset with "
            "dataset.train_test_split(test_size=...)."
        )
    missing = [s for s in ("train", "test") if s not in dataset]
    if missing:
        raise ValueError(
            f"dataset has no {' or '.join(repr(s) for s in missing)} split (it has "
            f"{sorted(dataset)}); split a Dataset with dataset.train_test_split(test_size=...)."
        )
    if not (isinstance(validation_fraction, float | int) and 0 < validation_fraction < 1):
        raise ValueError(
            f"validation_fraction must be a number in (0, 1), got {validation_fraction!r}."
        )
    out = {s: _columns(dataset[s], f"dataset[{s!r}]", columns) for s in SPLITS if s in dataset}
    if "validation" not in out:
        train = out["train"]
        n = len(next(iter(train.values())))
        num_train = n - int(round(n * validation_fraction))
        if not 0 < num_train < n:
            raise ValueError(
                f"dataset['train'] has {n} row(s): too few to hold out a validation fraction of "
                f"{validation_fraction}; give a 'validation' split or more rows."
            )
        out["validation"] = {c: a[num_train:] for c, a in train.items()}
        out["train"] = {c: a[:num_train] for c, a in train.items()}
    return {s: out[s] for s in SPLITS}


def _images(array: np.ndarray, where: str) -> np.ndarray:
    if array.ndim == 3:
        array = array[..., None]
    if array.ndim != 4:
        raise ValueError(
            f"{where} holds images of shape {array.shape[1:]}; expected (height, width) or "
            "(height, width, channels)."
        )
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float32)
    if np.issubdtype(array.dtype, np.integer):
        if array.size and (array.min() < 0 or array.max() > 255):
            raise ValueError(
                f"{where} holds integer pixels in {array.min()}..{array.max()}; integer images "
                "must be 0..255 (or give floating-point images)."
            )
        return array.astype(np.uint8)
    raise ValueError(f"{where} holds images of dtype {array.dtype}; give uint8 or float images.")


def _class_count(dataset: Mapping[str, Any], label_column: str) -> int | None:
    import datasets

    feature = dataset["train"].features.get(label_column)
    return len(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def image_dataset(
    dataset: Mapping[str, Any],
    *,
    name: str,
    image_column: str = "image",
    label_column: str = "label",
    num_classes: int | None = None,
    validation_fraction: float = 0.2,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> ImageDataset:
    """An image-classification dataset from a `datasets.DatasetDict`, for
    [`elo.tasks.ImageMLPTask`][] and [`elo.tasks.ConvImageTask`][].

    Images of any size and number of channels, `(H, W)` or `(H, W, C)` per row (arrays or
    `datasets.Image` features), `uint8` pixels in `0..255` (divided by 255 in preprocessing)
    or floating-point values (used as they are), with any number of classes. They are
    converted once to device arrays; splits as in [`elo.tasks.dataset_splits`][].

    **Arguments:**

    - `dataset`: a `datasets.DatasetDict` with `"train"` and `"test"` splits and optionally
      `"validation"`.
    - `name`: the dataset's name in task names (e.g. `"mydigits"` gives
      `mlp-w32-d1_mydigits-8x8x1`).
    - `image_column`, `label_column`: the columns holding the images and the integer labels.
    - `num_classes`: the number of classes (default: the label column's `ClassLabel` count,
      else the largest label + 1).
    - `validation_fraction`: the share of train rows held out when there is no validation split.
    - `mean`, `std`: optional per-channel statistics for standardisation.

    **Returns:**

    An [`elo.tasks.ImageDataset`][].

    !!! example

        ```python
        data = elo.tasks.image_dataset(hf_dataset_dict, name="mydigits")
        task = elo.tasks.ImageMLPTask(data, width=32, depth=1)
        ```
    """
    if not isinstance(name, str) or not name.isalnum() or not name.islower():
        raise ValueError(
            f"name must be lower-case letters and digits (it appears in task names), got {name!r}."
        )
    splits = dataset_splits(
        dataset, columns=[image_column, label_column], validation_fraction=validation_fraction
    )
    images = {s: _images(splits[s][image_column], f"dataset[{s!r}]") for s in SPLITS}
    shapes = {s: images[s].shape[1:] for s in SPLITS}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"The splits hold images of different shapes {shapes}; resize them.")
    labels = {}
    for s in SPLITS:
        label = splits[s][label_column]
        if label.ndim != 1 or not np.issubdtype(label.dtype, np.integer):
            raise ValueError(
                f"dataset[{s!r}] column {label_column!r} must hold one integer label per row, "
                f"got {label.dtype} of shape {label.shape[1:]} per row."
            )
        labels[s] = label
    if num_classes is None:
        num_classes = _class_count(dataset, label_column)
    if num_classes is None:
        num_classes = max(int(labels[s].max()) for s in SPLITS) + 1
    if not is_int_at_least(num_classes, 2):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}.")
    for s in SPLITS:
        low, high = int(labels[s].min()), int(labels[s].max())
        if low < 0 or high >= num_classes:
            raise ValueError(
                f"dataset[{s!r}] has labels in {low}..{high}, outside 0..{num_classes - 1} "
                f"for num_classes={num_classes}."
            )
    height, width, channels = shapes["train"]

    def split(s: str) -> ImageSplit:
        flat = images[s].reshape(images[s].shape[0], -1)
        return ImageSplit(jnp.asarray(flat), jnp.asarray(labels[s], jnp.int32))

    return ImageDataset(
        train=split("train"),
        validation=split("validation"),
        test=split("test"),
        name=name,
        height=int(height),
        width=int(width),
        channels=int(channels),
        mean=None if mean is None else tuple(float(m) for m in mean),
        std=None if std is None else tuple(float(v) for v in std),
        num_classes=num_classes,
    )
