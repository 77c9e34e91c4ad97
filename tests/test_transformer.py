"""The language-model task: shipped text, the byte-level transformer, the registry, training and
meta-training on it."""

import gzip
import hashlib
import math
import re
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import elo
from elo import tasks

from .helpers import without_runtime_type_checks


TOY = "transformer-w8-d1-h2_shakespeare-ctx8"
DATA_DIR = Path(elo.__file__).parent / "data" / "shakespeare"


def _tiny_dataset(seed=0, sizes=(300, 100, 120)):
    rng = np.random.default_rng(seed)
    splits = [jnp.asarray(rng.integers(0, 256, n), jnp.uint8) for n in sizes]
    return tasks.TextDataset(*splits, name="random")


def test_shipped_text_matches_its_provenance_record():
    """The files are the ones PROVENANCE.md describes (sizes and SHA-256 of the text), and the
    loaded splits are their bytes."""
    record = (DATA_DIR / "PROVENANCE.md").read_text()
    rows = re.findall(r"\| `(\w+)\.txt\.gz` \| [^|]+ \| ([\d,]+) \| `([0-9a-f]{64})` \|", record)
    assert [split for split, _, _ in rows] == ["train", "validation", "test"]
    data = tasks.load_text_dataset("shakespeare")
    for split, size, digest in rows:
        text = gzip.decompress((DATA_DIR / f"{split}.txt.gz").read_bytes())
        assert len(text) == int(size.replace(",", ""))
        assert hashlib.sha256(text).hexdigest() == digest
        assert np.asarray(data.split(split)).tobytes() == text
        text.decode("ascii")  # plain ASCII
    assert b"To be, or not to be" in np.asarray(data.train).tobytes()
    assert tasks.known_text_datasets() == ("shakespeare",)
    with pytest.raises(ValueError, match="Unknown text dataset 'gutenberg'; shipped: shakespeare"):
        tasks.load_text_dataset("gutenberg")


def test_registry_names():
    canonical = "transformer-w32-d2-h2_shakespeare-ctx32"
    assert canonical in tasks.list_tasks()
    task = tasks.get_task(canonical)
    assert isinstance(task, tasks.TextTransformerTask) and task.name == canonical
    task = tasks.get_task(TOY, batch_size=5)
    assert (task.width, task.depth, task.heads, task.context, task.batch_size) == (8, 1, 2, 8, 5)
    assert task.name == TOY


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "transformer-w32-d2_shakespeare-ctx32",
            r"Malformed language-model task name .*-h\{heads\}",
        ),
        (
            "transformer-w32-d2-h3_shakespeare-ctx32",
            r"width \(32\) must be divisible .* heads \(3\)",
        ),
        ("transformer-w32-d0-h2_shakespeare-ctx32", r"the depth must be positive, got 0"),
        ("transformer-w32-d2-h2_shakespeare-ctx0", r"the context must be positive, got 0"),
        ("transformer-w32-d2-h2_wiki-ctx32", r"unknown text dataset 'wiki'; shipped: shakespeare"),
        ("gpt2", r"transformer-w\{width\}-d\{depth\}-h\{heads\}_\{dataset\}-ctx\{context\}"),
    ],
)
def test_registry_errors_are_one_line(name, message):
    with pytest.raises(ValueError, match=message) as info:
        tasks.get_task(name)
    assert "\n" not in str(info.value)


def test_constructor_errors_name_the_field():
    data = _tiny_dataset()
    with pytest.raises(ValueError, match=r"TextTransformerTask\.width \(10\) must be divisible"):
        tasks.TextTransformerTask(data, width=10, heads=4)
    with pytest.raises(ValueError, match=r"context \(100\) \+ 1 exceeds the shortest split"):
        tasks.TextTransformerTask(data, context=100)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        tasks.TextTransformerTask(data, context=8, batch_size=0)
    with without_runtime_type_checks():
        with pytest.raises(ValueError, match="eval_split must be 'validation' or 'test'"):
            tasks.TextTransformerTask(data, context=8, eval_split="train")  # pyright: ignore
        with pytest.raises(ValueError, match=r"TextDataset\.test must be a 1-D uint8 array"):
            tasks.TextDataset(data.train, data.validation, jnp.zeros(5), name="x")


def test_parameters_loss_and_batches():
    task = tasks.get_task(TOY, batch_size=16)
    params = task.init(jr.key(0))
    assert all(v.dtype == jnp.float32 for v in params.values())
    assert params["token_embedding"].shape == (256, 8)
    assert params["position_embedding"].shape == (8, 8)
    assert params["blocks.0.attention.query_proj.weight"].shape == (8, 8)
    assert params["blocks.0.mlp_in.weight"].shape == (32, 8)
    assert params["head.weight"].shape == (256, 8)
    # Different keys, different weights; the embeddings are N(0, 0.02^2).
    other = task.init(jr.key(1))
    assert not np.allclose(params["head.weight"], other["head.weight"])
    assert 0.015 < float(jnp.std(params["token_embedding"])) < 0.025
    # Near-uniform predictions at initialisation.
    loss = eqx.filter_jit(task.loss)(params, jr.key(2))
    assert abs(float(loss) - math.log(256)) < 0.3
    batch = task.sample_batch(jr.key(2))
    assert batch.shape == (16, 9) and batch.dtype == jnp.uint8
    assert float(eqx.filter_jit(task.batch_loss)(params, batch)) == float(loss)
    train = np.asarray(task.data.train).tobytes()
    assert all(np.asarray(row).tobytes() in train for row in batch)  # windows of the text
    assert not np.array_equal(batch, task.sample_batch(jr.key(3)))
    # eval_loss reads the eval split: Julius Caesar's windows are not in the training plays.
    test_task = tasks.TextTransformerTask(task.data, width=8, depth=1, heads=2, context=8)
    assert np.isfinite(float(eqx.filter_jit(test_task.eval_loss)(params, jr.key(4))))


@pytest.mark.slow
def test_the_model_is_causal():
    task = tasks.TextTransformerTask(_tiny_dataset(), width=16, depth=2, heads=4, context=12)
    model = task.model(task.init(jr.key(0)))
    tokens = jnp.arange(12, dtype=jnp.int32) * 7
    changed = tokens.at[8].set(255)
    a, b = model(tokens), model(changed)
    np.testing.assert_array_equal(a[:8], b[:8])  # positions before the change see none of it
    assert not np.allclose(a[8:], b[8:])


@pytest.mark.slow
def test_evaluate_walks_the_whole_split():
    task = tasks.TextTransformerTask(_tiny_dataset(), width=8, depth=1, heads=2, context=9)
    params = task.init(jr.key(0))
    data = np.asarray(task.data.validation)
    windows = data[: (len(data) // 10) * 10].reshape(-1, 10)
    logits = jax.vmap(task.model(params))(jnp.asarray(windows[:, :-1], jnp.int32))
    log_probs = jax.nn.log_softmax(logits)
    targets = windows[:, 1:]
    expected = -np.mean(np.take_along_axis(np.asarray(log_probs), targets[..., None], -1))
    accuracy = np.mean(np.argmax(logits, -1) == targets)
    for chunk_size in (1, 3, 64):
        loss, acc = eqx.filter_jit(task.evaluate)(params, "validation", chunk_size=chunk_size)
        np.testing.assert_allclose(loss, expected, rtol=1e-5)
        np.testing.assert_allclose(acc, accuracy, rtol=1e-6)


def test_normalize_loss_is_bounded():
    task = tasks.TextTransformerTask(_tiny_dataset(), width=8, depth=1, heads=2, context=8)
    values = jnp.asarray([jnp.nan, jnp.inf, -jnp.inf, -1.0, 2.0, 100.0])
    out = jax.vmap(task.normalize_loss)(values)
    bound = 1.5 * math.log(256)
    np.testing.assert_allclose(out, [bound, bound, 0.0, 0.0, 2.0, bound], rtol=1e-6)


@pytest.mark.slow
def test_evaluate_trains_it_with_adamw_and_the_shipped_optimizer():
    task = tasks.get_task(TOY, batch_size=16)
    for optimizer in ("adamw", elo.pretrained("small_fc_mnist8")):
        learning_rate = 1e-2 if optimizer == "adamw" else None
        result = elo.evaluate(
            optimizer, task, num_steps=150, seeds=1, eval_every=150, learning_rate=learning_rate
        )
        assert result.task == TOY
        start, end = result.train_loss[0, 0], result.train_loss[0, -1]
        assert end < start - 0.5, (optimizer, start, end)
        assert np.isfinite(result.test_loss).all()


@pytest.mark.slow
def test_meta_training_on_the_toy_size():
    config = elo.presets.pes_small_fc(
        tasks=(TOY,),
        num_particles=2,
        truncation_length=4,
        min_horizon=8,
        max_horizon=16,
        task_augmentation=False,
        num_outer_steps=3,
        batch_size=4,
    )
    task = tasks.get_task(TOY, batch_size=4)
    state = elo.init(config, key=jr.key(0), tasks=[task])
    before = eqx.filter(state.learned_optimizer, eqx.is_inexact_array)
    for t in range(2):
        state = elo.meta_step(state, jr.key(t))
        metrics = state.metrics.to_dict()
        assert np.isfinite(metrics["meta_loss"]) and np.isfinite(metrics["grad_norm"])
    after = eqx.filter(state.learned_optimizer, eqx.is_inexact_array)
    assert not all(
        np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after))
    )
