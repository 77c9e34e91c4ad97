"""Task data from `datasets.Dataset`s built in the test (no network): any number of classes,
any image size and channels, uint8 or float images."""

import math

import datasets
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from PIL import Image

import elo

from .helpers import without_runtime_type_checks


def images_dict(n, shape, classes, *, dtype=np.uint8, seed=0, split=True):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        images = rng.integers(0, 256, size=(n, *shape), dtype=np.uint8)
    else:
        images = rng.normal(size=(n, *shape)).astype(dtype)
    labels = rng.integers(0, classes, size=n)
    ds = datasets.Dataset.from_dict({"image": images, "label": labels})
    return ds.train_test_split(test_size=0.25, shuffle=False) if split else ds


@pytest.mark.slow
def test_any_classes_size_and_channels_with_a_validation_split_held_out():
    dd = images_dict(40, (5, 4, 2), classes=3)
    data = elo.tasks.image_dataset(dd, name="tiny")
    assert (data.height, data.width, data.channels, data.num_classes) == (5, 4, 2, 3)
    assert [getattr(data, s).num_examples for s in ("train", "validation", "test")] == [24, 6, 10]
    raw = np.asarray(dd["train"].with_format("numpy")[:]["image"], np.uint8)
    assert data.train.images.dtype == jnp.uint8
    assert np.array_equal(np.asarray(data.train.images), raw[:24].reshape(24, -1))
    assert np.array_equal(np.asarray(data.validation.images), raw[24:].reshape(6, -1))
    task = elo.tasks.ImageMLPTask(data, width=8, batch_size=16)
    params = task.init(jr.key(0))
    assert params["layer1"]["w"].shape == (8, 3)
    assert task.logits(params, data.preprocess(data.test.images)).shape == (10, 3)
    assert task.name == "mlp-w8-d1_tiny-5x4x2"
    assert float(task.normalize_loss(jnp.float32(jnp.inf))) == pytest.approx(1.5 * math.log(3))
    assert abs(float(task.loss(params, jr.key(1))) - math.log(3)) < 0.5


def test_pil_images_and_a_class_label_feature():
    rng = np.random.default_rng(1)
    pictures = [Image.fromarray(rng.integers(0, 256, (6, 6), dtype=np.uint8)) for _ in range(12)]
    features = datasets.Features(
        {"img": datasets.Image(), "y": datasets.ClassLabel(names=["a", "b", "c", "d"])}
    )
    ds = datasets.Dataset.from_dict(
        {"img": pictures, "y": [0, 1, 2] * 4}, features=features
    ).train_test_split(test_size=4, shuffle=False)
    data = elo.tasks.image_dataset(ds, name="pics", image_column="img", label_column="y")
    assert (data.height, data.width, data.channels, data.num_classes) == (6, 6, 1, 4)
    assert np.array_equal(np.asarray(data.train.images[0]), np.asarray(pictures[0]).reshape(-1))


@pytest.mark.slow
def test_float_images_are_used_as_they_are_and_train():
    dd = images_dict(48, (4, 4, 3), classes=5, dtype=np.float32)
    data = elo.tasks.image_dataset(dd, name="floaty", validation_fraction=0.25)
    assert data.train.images.dtype == jnp.float32 and data.num_classes == 5
    assert jnp.array_equal(data.preprocess(data.test.images), data.test.images)
    task = elo.tasks.ConvImageTask(data, channels=4, depth=1, batch_size=8)
    assert task.init(jr.key(0))["head"]["w"].shape == (4, 5)
    result = elo.evaluate("adamw", task, num_steps=3, eval_every=3)
    assert np.all(np.isfinite(result.test_loss)) and np.all(np.isfinite(result.test_accuracy))


def test_dataset_splits_feed_a_model_task():
    rng = np.random.default_rng(2)
    make = lambda n: datasets.Dataset.from_dict(  # noqa: E731
        {"x": rng.normal(size=(n, 3)).astype(np.float32), "y": rng.normal(size=n)}
    )
    dd = datasets.DatasetDict({"train": make(20), "validation": make(5), "test": make(7)})
    splits = elo.tasks.dataset_splits(dd)
    assert {s: splits[s]["x"].shape for s in splits} == {
        "train": (20, 3),
        "validation": (5, 3),
        "test": (7, 3),
    }
    assert np.array_equal(splits["test"]["x"], np.asarray(dd["test"]["x"][:]))

    def loss(w, batch):
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    task = elo.tasks.ModelTask(jnp.zeros(3), loss, splits, batch_size=4, name="linear")
    assert jax.grad(task.loss)(task.init(jr.key(0)), jr.key(0)).shape == (3,)


def test_bad_datasets_are_one_line():
    def refuses(match, dataset, **kwargs):
        # Users do not run the type checker: they see the library's own message.
        with without_runtime_type_checks(), pytest.raises(ValueError, match=match) as error:
            elo.tasks.image_dataset(dataset, name=kwargs.pop("name", "bad"), **kwargs)
        assert "\n" not in str(error.value)

    ragged = datasets.Dataset.from_dict(
        {"image": [np.zeros((2, 2), np.uint8), np.zeros((3, 3), np.uint8)] * 2, "label": [0, 1] * 2}
    )
    # Both splits hold both shapes (a random train_test_split may give one split one shape).
    both = datasets.DatasetDict({"train": ragged, "test": ragged})
    refuses("column 'image' holds values of different shapes", both)
    refuses("no 'test' split", datasets.DatasetDict({"train": ragged}))
    refuses("split a single Dataset with dataset.train_test_split", ragged)
    dd = images_dict(20, (2, 2), classes=3)
    refuses(r"labels in 0\.\.2, outside 0\.\.1 for num_classes=2", dd, num_classes=2)
    refuses("lower-case letters and digits", dd, name="my-data")
    refuses(r"no column\(s\) \['pixels'\]", dd, image_column="pixels")
    wide = datasets.Dataset.from_dict({"image": np.full((8, 2, 2), 300), "label": [0, 1] * 4})
    refuses(r"integer pixels in 300\.\.300", wide.train_test_split(0.5))
