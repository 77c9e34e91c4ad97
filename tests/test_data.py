"""Data loading for the image tasks: parquet format, search order, splits, preprocessing, errors."""

import os
import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

import elo.tasks as tasks
from elo.tasks import _data


EMBEDDED = Path(_data.__file__).resolve().parent.parent / "data"


def write_split(
    path: Path,
    images: np.ndarray,
    labels: np.ndarray,
    height: int,
    width: int,
    channels: int,
    *,
    metadata: dict[str, str] | None = None,
    image_type: pa.DataType | None = None,
    label_type: pa.DataType = pa.int64(),
) -> None:
    """Write one split in the documented format (the shipped files' schema and metadata)."""
    size = images.shape[1]
    image_type = image_type or pa.list_(pa.uint8(), size)
    flat = pa.array(images.reshape(-1), type=image_type.value_type)
    if pa.types.is_fixed_size_list(image_type):
        column = pa.FixedSizeListArray.from_arrays(flat, size)
    else:
        column = pa.ListArray.from_arrays(
            pa.array(np.arange(0, len(flat) + 1, size), pa.int32()), flat
        )
    table = pa.table({"image": column, "label": pa.array(labels, type=label_type)})
    if metadata is None:
        metadata = {
            "height": str(height),
            "width": str(width),
            "channels": str(channels),
            "layout": "HWC",
            "num_rows": str(len(labels)),
            "dataset": "synthetic",
        }
    table = table.replace_schema_metadata(metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


def make_arrays(seed: int, rows: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (rows, size), dtype=np.uint8)
    labels = rng.integers(0, 10, rows, dtype=np.int64)
    return images, labels


def write_dataset(root: Path, dirname: str, height: int, width: int, channels: int, **kwargs):
    size = height * width * channels
    train = make_arrays(kwargs.pop("seed", 0), kwargs.pop("train_rows", 10), size)
    test = make_arrays(1000, kwargs.pop("test_rows", 5), size)
    for name, (images, labels) in (("train", train), ("test", test)):
        write_split(root / dirname / f"{name}.parquet", images, labels, height, width, channels)
    return train, test


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("ELO_DATA_DIR", raising=False)


# ---------------------------------------------------------------------------------------------
# Round trip, splits, search order


@settings(deadline=None, max_examples=8)
@given(
    dataset=st.sampled_from(["mnist", "fashionmnist", "svhn"]),
    height=st.integers(1, 5),
    width=st.integers(1, 5),
    channels=st.sampled_from([1, 3]),
    train_rows=st.integers(2, 23),
    test_rows=st.integers(1, 7),
    seed=st.integers(0, 2**31 - 1),
    fixed_size=st.booleans(),
)
def test_round_trip(
    tmp_path_factory, dataset, height, width, channels, train_rows, test_rows, seed, fixed_size
):
    root = tmp_path_factory.mktemp("roundtrip")
    size = height * width * channels
    train = make_arrays(seed, train_rows, size)
    test = make_arrays(seed + 1, test_rows, size)
    dirname = f"{_data._DATASET_DIRS[dataset]}_{height}x{width}"
    # A plain `list<uint8>` column (as HF `datasets` writes it) is accepted as well.
    image_type = None if fixed_size else pa.list_(pa.uint8())
    for name, (images, labels) in (("train", train), ("test", test)):
        write_split(
            root / dirname / f"{name}.parquet",
            images,
            labels,
            height,
            width,
            channels,
            image_type=image_type,
        )
    before = sorted(p.name for p in root.rglob("*"))

    data = tasks.load_image_dataset(dataset, height, width, channels, data_dir=root)

    num_train = train_rows * 4 // 5
    assert 1 <= num_train < train_rows
    np.testing.assert_array_equal(np.asarray(data.train.images), train[0][:num_train])
    np.testing.assert_array_equal(np.asarray(data.train.labels), train[1][:num_train])
    np.testing.assert_array_equal(np.asarray(data.validation.images), train[0][num_train:])
    np.testing.assert_array_equal(np.asarray(data.validation.labels), train[1][num_train:])
    np.testing.assert_array_equal(np.asarray(data.test.images), test[0])
    np.testing.assert_array_equal(np.asarray(data.test.labels), test[1])
    assert data.train.images.dtype == jnp.uint8
    assert data.train.labels.dtype == jnp.int32
    assert (data.name, data.height, data.width, data.channels) == (
        dataset,
        height,
        width,
        channels,
    )
    # Loading writes no cache files next to the data.
    assert sorted(p.name for p in root.rglob("*")) == before


def test_embedded_data_shapes_and_label_counts(no_env):
    mnist = tasks.load_image_dataset("mnist", 8, 8, 1)
    assert mnist.train.images.shape == (48000, 64)
    assert mnist.validation.images.shape == (12000, 64)
    assert mnist.test.images.shape == (10000, 64)
    # The label counts of the whole MNIST train and test files (PROVENANCE.md).
    labels = np.concatenate([np.asarray(mnist.train.labels), np.asarray(mnist.validation.labels)])
    expected_train = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    expected_test = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert np.bincount(labels, minlength=10).tolist() == expected_train
    assert np.bincount(np.asarray(mnist.test.labels), minlength=10).tolist() == expected_test

    cifar = tasks.load_image_dataset("cifar10", 8, 8, 3)
    assert cifar.train.images.shape == (40000, 192)
    assert cifar.validation.images.shape == (10000, 192)
    assert cifar.test.images.shape == (10000, 192)
    labels = np.concatenate([np.asarray(cifar.train.labels), np.asarray(cifar.validation.labels)])
    assert np.bincount(labels, minlength=10).tolist() == [5000] * 10
    # Per-channel standardisation: PROVENANCE.md gives train channel means 0.4913, 0.4821,
    # 0.4465, so the standardised means are within (0.0002 / 0.24) of 0; 0.01 leaves room for
    # the 80% subset.
    x = cifar.preprocess(cifar.train.images).reshape(-1, 64, 3)
    np.testing.assert_allclose(np.asarray(jnp.mean(x, axis=(0, 1))), 0.0, atol=0.01)

    fashion = tasks.load_image_dataset("fashionmnist", 8, 8, 1)
    labels = np.concatenate(
        [np.asarray(fashion.train.labels), np.asarray(fashion.validation.labels)]
    )
    assert np.bincount(labels, minlength=10).tolist() == [6000] * 10


def test_loading_writes_nothing_into_package():
    before = sorted(str(p) for p in EMBEDDED.rglob("*"))
    _data._read_split_file(EMBEDDED / "mnist_8x8" / "test.parquet", 8, 8, 1)  # uncached read
    assert sorted(str(p) for p in EMBEDDED.rglob("*")) == before


def test_cache_reuses_loaded_files(tmp_path):
    write_dataset(tmp_path, "mnist_2x2", 2, 2, 1)
    info = _data._read_split_file_cached.cache_info
    first = tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)
    hits, misses = info().hits, info().misses
    second = tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)
    assert info().hits == hits + 2 and info().misses == misses
    np.testing.assert_array_equal(np.asarray(first.test.images), np.asarray(second.test.images))

    # A rewritten file (new mtime/size) is read again.
    images, labels = make_arrays(7, 9, 4)
    path = tmp_path / "mnist_2x2" / "test.parquet"
    os.remove(path)
    write_split(path, images, labels, 2, 2, 1)
    third = tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)
    np.testing.assert_array_equal(np.asarray(third.test.images), images)


def test_search_order(tmp_path, monkeypatch):
    arg_dir, env_dir, empty_dir = tmp_path / "arg", tmp_path / "env", tmp_path / "empty"
    empty_dir.mkdir()
    arg_train, _ = write_dataset(arg_dir, "mnist_2x2", 2, 2, 1, seed=1)
    env_train, _ = write_dataset(env_dir, "mnist_2x2", 2, 2, 1, seed=2)
    monkeypatch.setenv("ELO_DATA_DIR", str(env_dir))

    from_arg = tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=arg_dir)
    np.testing.assert_array_equal(np.asarray(from_arg.train.images), arg_train[0][:8])
    from_env = tasks.load_image_dataset("mnist", 2, 2, 1)
    np.testing.assert_array_equal(np.asarray(from_env.train.images), env_train[0][:8])
    # A data_dir without the dataset's directory falls through to $ELO_DATA_DIR ...
    fallthrough = tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=empty_dir)
    np.testing.assert_array_equal(np.asarray(fallthrough.train.images), env_train[0][:8])
    # ... and then to the embedded copy.
    embedded = tasks.load_image_dataset("mnist", 8, 8, 1, data_dir=empty_dir)
    assert embedded.train.images.shape == (48000, 64)


def test_get_task_uses_data_dir(tmp_path, no_env):
    write_dataset(tmp_path, "cifar10_4x4", 4, 4, 3, train_rows=20)
    task = tasks.get_task("mlp-w8-d2_cifar10-4x4x3", data_dir=tmp_path, batch_size=3)
    assert isinstance(task, tasks.ImageMLPTask)
    assert task.data.train.images.shape == (16, 48)
    assert task.data.mean == (0.4914, 0.4822, 0.4465)
    assert task.name == "mlp-w8-d2_cifar10-4x4x3"


# ---------------------------------------------------------------------------------------------
# Preprocessing and sampling


def _dataset(images, labels, height, width, channels, mean=None, std=None, name="synthetic"):
    split = tasks.ImageSplit(jnp.asarray(images), jnp.asarray(labels, jnp.int32))
    return tasks.ImageDataset(
        train=split,
        validation=split,
        test=split,
        name=name,
        height=height,
        width=width,
        channels=channels,
        mean=mean,
        std=std,
    )


@settings(deadline=None, max_examples=5)
@given(
    height=st.integers(1, 4),
    width=st.integers(1, 4),
    rows=st.sampled_from([1, 5]),
    seed=st.integers(0, 2**31 - 1),
)
def test_preprocess_channels_are_fastest_axis(height, width, rows, seed):
    images, labels = make_arrays(seed, rows, height * width * 3)
    mean, std = _data._CHANNEL_STATS["cifar10"]
    data = _dataset(images, labels, height, width, 3, mean, std)
    expected = (images.reshape(rows, height, width, 3).astype(np.float32) / 255 - mean) / np.array(
        std
    )
    # float32 round-off on values of size <= 2.1 (one division, one subtraction, one division).
    np.testing.assert_allclose(
        np.asarray(data.preprocess(jnp.asarray(images))),
        expected.reshape(rows, -1),
        rtol=1e-6,
        atol=1e-6,
    )
    plain = _dataset(images, labels, height, width, 3)
    # XLA may divide as a multiply by 1/255: up to one float32 ulp (2^-23 relative) apart.
    np.testing.assert_allclose(
        np.asarray(plain.preprocess(jnp.asarray(images))),
        images.astype(np.float32) / 255,
        rtol=2.0**-23,
        atol=0.0,
    )


@eqx.filter_jit
def _sample_with_many_keys(split, key, batch):
    first = split.sample(key, batch)
    others = jax.vmap(lambda k: split.sample(k, batch)[0])(jax.random.split(key, 64))
    return first, split.sample(key, batch), others


# Shapes come from small fixed sets: every new shape costs a compilation.
@settings(deadline=None, max_examples=6)
@given(rows=st.sampled_from([2, 50]), seed=st.integers(0, 2**31 - 1))
def test_sample_pairs_rows_and_varies_with_key(rows, seed):
    # Row i holds the value i in every pixel and the label i % 10, so pairing can be checked.
    batch = 8
    images = np.repeat(np.arange(rows, dtype=np.uint8)[:, None], 4, axis=1)
    labels = np.arange(rows) % 10
    split = tasks.ImageSplit(jnp.asarray(images), jnp.asarray(labels, jnp.int32))
    (x, y), (x_again, y_again), others = _sample_with_many_keys(split, jax.random.key(seed), batch)
    assert x.shape == (batch, 4) and y.shape == (batch,)
    x, y = np.asarray(x), np.asarray(y)
    assert np.all(x == x[:, :1]) and np.all(x[:, 0] < rows)
    np.testing.assert_array_equal(y, x[:, 0] % 10)
    # Same key, same batch.
    np.testing.assert_array_equal(np.asarray(x_again), x)
    np.testing.assert_array_equal(np.asarray(y_again), y)
    # Another key repeats this exact batch with probability rows^-batch <= 2^-8, so all 64
    # other keys do so with probability <= 2^-512.
    assert any(not np.array_equal(o, x) for o in np.asarray(others))


# ---------------------------------------------------------------------------------------------
# Errors


def test_missing_dataset_directory(tmp_path, no_env):
    with pytest.raises(tasks.MissingDataError) as info:
        tasks.load_image_dataset("svhn", 8, 8, 3, data_dir=tmp_path)
    message = str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, FileNotFoundError)
    assert "svhn_8x8/train.parquet" in message
    assert str(tmp_path / "svhn_8x8" / "train.parquet") in message
    assert str(EMBEDDED / "svhn_8x8" / "train.parquet") in message
    assert "Expected format" in message and "fixed_size_list<uint8>" in message
    assert "'height', 'width', 'channels'" in message


def test_missing_file_env_listed(tmp_path, monkeypatch):
    monkeypatch.setenv("ELO_DATA_DIR", str(tmp_path / "env"))
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "env" / "svhn_32x32"))):
        tasks.load_image_dataset("svhn", 32, 32, 3)


def test_missing_test_file(tmp_path, no_env):
    write_dataset(tmp_path, "mnist_3x3", 3, 3, 1)
    os.remove(tmp_path / "mnist_3x3" / "test.parquet")
    with pytest.raises(ValueError, match=r"Missing data file 'mnist_3x3/test.parquet'") as info:
        tasks.load_image_dataset("mnist", 3, 3, 1, data_dir=tmp_path)
    assert str(tmp_path / "mnist_3x3") in str(info.value)


def test_data_dir_not_a_directory(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        tasks.load_image_dataset("mnist", 8, 8, 1, data_dir=tmp_path / "nope")


def test_wrong_shape_in_metadata(tmp_path):
    images, labels = make_arrays(0, 10, 64)
    for split in ("train", "test"):
        write_split(tmp_path / "mnist_4x4" / f"{split}.parquet", images, labels, 8, 8, 1)
    with pytest.raises(ValueError, match=r"holds 8x8x1 images .* but 4x4x1 were asked for"):
        tasks.get_task("mlp-w8-d1_mnist-4x4x1", data_dir=tmp_path)


def test_wrong_image_length(tmp_path):
    images, labels = make_arrays(0, 10, 15)
    for split in ("train", "test"):
        write_split(tmp_path / "mnist_4x4" / f"{split}.parquet", images, labels, 4, 4, 1)
    with pytest.raises(ValueError, match=r"images of length \[15\], but 4x4x1 images have 16"):
        tasks.load_image_dataset("mnist", 4, 4, 1, data_dir=tmp_path)


def test_missing_metadata(tmp_path):
    images, labels = make_arrays(0, 10, 4)
    for split in ("train", "test"):
        write_split(
            tmp_path / "mnist_2x2" / f"{split}.parquet", images, labels, 2, 2, 1, metadata={}
        )
    with pytest.raises(ValueError, match=r"lacks the schema metadata key\(s\) \['height'"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)


def test_wrong_layout(tmp_path):
    images, labels = make_arrays(0, 10, 4)
    metadata = {"height": "2", "width": "2", "channels": "1", "layout": "CHW"}
    for split in ("train", "test"):
        write_split(
            tmp_path / "mnist_2x2" / f"{split}.parquet",
            images,
            labels,
            2,
            2,
            1,
            metadata=metadata,
        )
    with pytest.raises(ValueError, match="has layout 'CHW'; only 'HWC'"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)


@pytest.mark.parametrize("bad", [10, -1, 255])
def test_labels_out_of_range(tmp_path, bad):
    images, labels = make_arrays(0, 10, 4)
    labels[3] = bad
    for split in ("train", "test"):
        write_split(tmp_path / "mnist_2x2" / f"{split}.parquet", images, labels, 2, 2, 1)
    with pytest.raises(ValueError, match=r"has 1 labels out of range 0\.\.9"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)


def test_wrong_dtypes(tmp_path):
    images, labels = make_arrays(0, 10, 4)
    path = tmp_path / "a" / "mnist_2x2" / "train.parquet"
    write_split(path, images, labels, 2, 2, 1, image_type=pa.list_(pa.int16(), 4))
    write_split(path.with_name("test.parquet"), images, labels, 2, 2, 1)
    with pytest.raises(ValueError, match=r"'image' column of type .*int16.*expected"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path / "a")

    path = tmp_path / "b" / "mnist_2x2" / "train.parquet"
    write_split(path, images, labels.astype(np.float64), 2, 2, 1, label_type=pa.float64())
    write_split(path.with_name("test.parquet"), images, labels, 2, 2, 1)
    with pytest.raises(ValueError, match=r"'label' column of type double; expected integers"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path / "b")


def test_not_parquet(tmp_path):
    (tmp_path / "mnist_2x2").mkdir()
    for split in ("train", "test"):
        (tmp_path / "mnist_2x2" / f"{split}.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="is not a readable parquet file"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)


def test_too_few_train_rows(tmp_path):
    write_dataset(tmp_path, "mnist_2x2", 2, 2, 1, train_rows=1)
    with pytest.raises(ValueError, match=r"has 1 row\(s\); at least 2 are needed"):
        tasks.load_image_dataset("mnist", 2, 2, 1, data_dir=tmp_path)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"Unknown dataset 'imagenet'; known datasets"):
        tasks.load_image_dataset("imagenet", 8, 8, 3)
    with pytest.raises(ValueError, match=r"`height` must be a positive integer, got 0"):
        tasks.load_image_dataset("mnist", 0, 8, 1)
    with pytest.raises(ValueError, match=r"needs channels=3, got 1"):
        tasks.load_image_dataset("cifar10", 8, 8, 1)


def test_dataset_invariants():
    images, labels = make_arrays(0, 4, 12)
    with pytest.raises(ValueError, match=r"ImageDataset.train has images of length 12"):
        _dataset(images, labels, 2, 2, 1)
    with pytest.raises(ValueError, match=r"need one value per channel \(3\), got 1 and 1"):
        _dataset(images, labels, 2, 2, 3, mean=(0.0,), std=(1.0,))
    with pytest.raises(ValueError, match=r"ImageDataset.std must be positive"):
        _dataset(images, labels, 2, 2, 3, mean=(0.0,) * 3, std=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="at least one example"):
        tasks.ImageSplit(jnp.zeros((0, 4), jnp.uint8), jnp.zeros((0,), jnp.int32))
    data = _dataset(images, labels, 2, 2, 3)
    # Under the tests' runtime type checker the `Literal` annotation rejects it first.
    with pytest.raises((ValueError, TypeError), match=r"'valid'"):
        data.split("valid")  # pyright: ignore[reportArgumentType]
