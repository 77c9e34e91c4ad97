"""Build inner problems from their names."""

import os
import re

from .._checks import is_int_at_least
from ._base import AbstractTask
from ._cnn import ConvImageTask
from ._data import known_datasets, load_image_dataset
from ._image_mlp import ImageMLPTask
from ._quadratic import QuadraticTask
from ._text import known_text_datasets, load_text_dataset
from ._transformer import TextTransformerTask


_CANONICAL_TASKS = (
    "mlp-w32-d1_mnist-8x8x1",
    "mlp-w32-d1_fashionmnist-8x8x1",
    "mlp-w32-d1_cifar10-8x8x3",
    "mlp-w32-d1_svhn-8x8x3",
    "conv-c16-d2_cifar10-8x8x3",
    "transformer-w32-d2-h2_shakespeare-ctx32",
    "quadratic-d10",
)
_IMAGE_FORM = "mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}"
_CONV_FORM = "conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C}"
_TEXT_FORM = "transformer-w{width}-d{depth}-h{heads}_{dataset}-ctx{context}"
_QUADRATIC_FORM = "quadratic-d{dim}"
_IMAGE_RE = re.compile(
    r"mlp-w(?P<width>\d+)-d(?P<depth>\d+)_(?P<dataset>[a-z0-9]+)-"
    r"(?P<height>\d+)x(?P<image_width>\d+)x(?P<channels>\d+)"
)
_CONV_RE = re.compile(
    r"conv-c(?P<channels>\d+)-d(?P<depth>\d+)_(?P<dataset>[a-z0-9]+)-"
    r"(?P<height>\d+)x(?P<image_width>\d+)x(?P<channels_in>\d+)"
)
_TEXT_RE = re.compile(
    r"transformer-w(?P<width>\d+)-d(?P<depth>\d+)-h(?P<heads>\d+)_(?P<dataset>[a-z0-9]+)-"
    r"ctx(?P<context>\d+)"
)
_QUADRATIC_RE = re.compile(r"quadratic-d(?P<dim>\d+)")


def list_tasks() -> list[str]:
    """The canonical task names.

    These are the four ELO meta-training tasks (MLP, one hidden layer of 32 units, on 8x8 MNIST,
    Fashion-MNIST, CIFAR-10 and SVHN), a held-out convolutional task on 8x8 CIFAR-10, a held-out
    byte-level language model on Shakespeare and a small quadratic.
    [`elo.tasks.get_task`][] accepts the general forms
    `mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}`,
    `conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C}`,
    `transformer-w{width}-d{depth}-h{heads}_{dataset}-ctx{context}` and `quadratic-d{dim}` too.
    SVHN is listed but not shipped: its files must be supplied through `data_dir` or
    `ELO_DATA_DIR`.

    **Returns:**

    A list of task names.
    """
    return list(_CANONICAL_TASKS)


def _positive(name: str, field: str, text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(f"Task {name!r}: the {field} must be positive, got {value}.")
    return value


def get_task(
    name: str, *, data_dir: str | os.PathLike | None = None, batch_size: int = 64
) -> AbstractTask:
    """Build an inner problem from its name.

    Names:

    - `mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}`: an [`elo.tasks.ImageMLPTask`][] with `depth`
      hidden layers of `width` units on `dataset` (`mnist`, `fashionmnist`, `cifar10`, `svhn`)
      at `H x W x C`, e.g. `mlp-w32-d1_cifar10-8x8x3`. Data are loaded with
      [`elo.tasks.load_image_dataset`][] from `data_dir`, `$ELO_DATA_DIR` or the embedded copy.
    - `conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C}`: an [`elo.tasks.ConvImageTask`][] with
      `depth` 3x3 convolutions of `channels` filters, global average pooling and a linear head,
      e.g. `conv-c16-d2_cifar10-8x8x3` (a held-out evaluation task).
    - `transformer-w{width}-d{depth}-h{heads}_{dataset}-ctx{context}`: an
      [`elo.tasks.TextTransformerTask`][], a decoder-only transformer of `depth` blocks of
      width `width` with `heads` attention heads, predicting the next byte of the shipped text
      `dataset` (`shakespeare`) from up to `context` bytes, e.g.
      `transformer-w32-d2-h2_shakespeare-ctx32` (a held-out evaluation task; at toy size, e.g.
      `transformer-w8-d1-h1_shakespeare-ctx8`, a meta-training task).
    - `quadratic-d{dim}`: a noise-free [`elo.tasks.QuadraticTask`][] with `dim` parameters
      (`seed=0`, condition number 10).

    **Arguments:**

    - `name`: the task name; see [`elo.tasks.list_tasks`][].
    - `data_dir`: a directory searched first for the data files of image tasks.
    - `batch_size`: minibatch size of image and language-model tasks (windows of `context + 1`
      bytes for the latter; positive; ignored by quadratics).

    **Returns:**

    The task, an [`elo.tasks.AbstractTask`][].

    **Raises:**

    `ValueError` for an unknown or malformed name, non-positive sizes, or data files that are
    missing (the error lists where it looked) or do not match the name.
    """
    if not is_int_at_least(batch_size, 1):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
    if not isinstance(name, str):
        raise ValueError(f"A task name must be a string, got {name!r}.")
    if match := _IMAGE_RE.fullmatch(name):
        width = _positive(name, "width", match["width"])
        depth = _positive(name, "depth", match["depth"])
        height = _positive(name, "image height", match["height"])
        image_width = _positive(name, "image width", match["image_width"])
        channels = _positive(name, "number of channels", match["channels"])
        dataset = match["dataset"]
        if dataset not in known_datasets():
            raise ValueError(
                f"Task {name!r}: unknown dataset {dataset!r}; known datasets: "
                f"{', '.join(known_datasets())}."
            )
        data = load_image_dataset(dataset, height, image_width, channels, data_dir=data_dir)
        return ImageMLPTask(data, width=width, depth=depth, batch_size=batch_size)
    if name.startswith("mlp-"):
        raise ValueError(
            f"Malformed image task name {name!r}; expected the form {_IMAGE_FORM!r} "
            "with positive integers, e.g. 'mlp-w32-d1_mnist-8x8x1'."
        )
    if match := _CONV_RE.fullmatch(name):
        channels = _positive(name, "number of filters", match["channels"])
        depth = _positive(name, "depth", match["depth"])
        height = _positive(name, "image height", match["height"])
        image_width = _positive(name, "image width", match["image_width"])
        channels_in = _positive(name, "number of channels", match["channels_in"])
        dataset = match["dataset"]
        if dataset not in known_datasets():
            raise ValueError(
                f"Task {name!r}: unknown dataset {dataset!r}; known datasets: "
                f"{', '.join(known_datasets())}."
            )
        data = load_image_dataset(dataset, height, image_width, channels_in, data_dir=data_dir)
        return ConvImageTask(data, channels=channels, depth=depth, batch_size=batch_size)
    if name.startswith("conv-"):
        raise ValueError(
            f"Malformed convolutional task name {name!r}; expected the form {_CONV_FORM!r} "
            "with positive integers, e.g. 'conv-c16-d2_cifar10-8x8x3'."
        )
    if match := _TEXT_RE.fullmatch(name):
        width = _positive(name, "width", match["width"])
        depth = _positive(name, "depth", match["depth"])
        heads = _positive(name, "number of heads", match["heads"])
        context = _positive(name, "context", match["context"])
        if width % heads:
            raise ValueError(
                f"Task {name!r}: the width ({width}) must be divisible by the number of heads "
                f"({heads})."
            )
        dataset = match["dataset"]
        if dataset not in known_text_datasets():
            raise ValueError(
                f"Task {name!r}: unknown text dataset {dataset!r}; shipped: "
                f"{', '.join(known_text_datasets())}."
            )
        return TextTransformerTask(
            load_text_dataset(dataset),
            width=width,
            depth=depth,
            heads=heads,
            context=context,
            batch_size=batch_size,
        )
    if name.startswith("transformer-"):
        raise ValueError(
            f"Malformed language-model task name {name!r}; expected the form {_TEXT_FORM!r} "
            "with positive integers, e.g. 'transformer-w32-d2-h2_shakespeare-ctx32'."
        )
    if match := _QUADRATIC_RE.fullmatch(name):
        return QuadraticTask(_positive(name, "dimension", match["dim"]))
    if name.startswith("quadratic"):
        raise ValueError(
            f"Malformed quadratic task name {name!r}; expected the form {_QUADRATIC_FORM!r}, "
            "e.g. 'quadratic-d10'."
        )
    raise ValueError(
        f"Unknown task {name!r}. Known tasks: {', '.join(_CANONICAL_TASKS)}. General forms: "
        f"{_IMAGE_FORM!r}, {_CONV_FORM!r} (datasets: {', '.join(known_datasets())}), "
        f"{_TEXT_FORM!r} (datasets: {', '.join(known_text_datasets())}) and {_QUADRATIC_FORM!r}."
    )
