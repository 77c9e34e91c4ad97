"""Any Equinox model, a loss and data splits as an inner problem: `elo.tasks.ModelTask`."""

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, Key

from .._checks import is_finite_number, is_int_at_least
from .._custom_types import Params, PRNGKeyArray, PyTree, Scalar
from ._base import AbstractTask


SPLITS = ("train", "validation", "test")
_NAME_FORBIDDEN = ("@", ",", ":")


def _keystr(path: Any) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _as_split(where: str, split: Any) -> PyTree:
    """The split's leaves as device arrays, checked for one row per example on every leaf."""
    leaves, treedef = jax.tree_util.tree_flatten_with_path(split)
    if not leaves:
        raise ValueError(f"{where} holds no arrays; give a pytree of arrays, one row per example.")
    arrays = []
    for path, leaf in leaves:
        try:
            array = jnp.asarray(leaf)
        except TypeError:
            raise ValueError(
                f"{where}{_keystr(path)} is a {type(leaf).__name__}, not an array; every leaf "
                "of a split must be an array with one row per example."
            ) from None
        if array.ndim == 0:
            raise ValueError(
                f"{where}{_keystr(path)} is a scalar; every leaf of a split needs a leading "
                "example axis."
            )
        arrays.append(array)
    sizes = {_keystr(path): a.shape[0] for (path, _), a in zip(leaves, arrays)}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{p}: {n}" for p, n in sizes.items())
        raise ValueError(
            f"{where} has leaves with different leading axes ({listed}); every leaf of a split "
            "needs one row per example, so their first dimensions must be equal."
        )
    if arrays[0].shape[0] < 1:
        raise ValueError(f"{where} has no examples (leading axis 0); give at least one.")
    for (path, _), array in zip(leaves, arrays):
        _check_finite(f"{where}{_keystr(path)}", array)
    return jax.tree_util.tree_unflatten(treedef, arrays)


def _check_finite(where: str, array: Array) -> None:
    """Refuse NaN and infinities: in the train split they make the run's loss NaN, in the
    validation or test split the reported loss."""
    if not jnp.issubdtype(array.dtype, jnp.inexact):
        return
    finite = jnp.isfinite(array).reshape(array.shape[0], -1).all(axis=1)
    bad = int(array.shape[0] - jnp.count_nonzero(finite))
    if bad:
        first = int(jnp.argmin(finite))
        examples = "example" if bad == 1 else "examples"
        raise ValueError(
            f"{where} has NaN or infinite values in {bad} {examples} (the first is example "
            f"{first}); drop or impute them before building the task."
        )


def _row_spec(split: PyTree) -> list[tuple[str, tuple[int, ...], str]]:
    leaves = jax.tree_util.tree_flatten_with_path(split)[0]
    return [(_keystr(p), tuple(a.shape[1:]), str(a.dtype)) for p, a in leaves]


def _check_data(data: Any) -> dict[str, PyTree]:
    if not isinstance(data, Mapping):
        raise ValueError(
            f"ModelTask.data must be a mapping with the keys {SPLITS}, got "
            f"{type(data).__name__}, e.g. data={{'train': (x, y), 'validation': ..., 'test': ...}}."
        )
    missing = [s for s in SPLITS if s not in data]
    unknown = sorted(str(k) for k in data if k not in SPLITS)
    if missing or unknown:
        raise ValueError(
            f"ModelTask.data must have exactly the keys {SPLITS}; missing {missing}, "
            f"unknown {unknown}."
        )
    splits = {s: _as_split(f"ModelTask.data[{s!r}]", data[s]) for s in SPLITS}
    train = jax.tree.structure(splits["train"])
    for s in SPLITS[1:]:
        if jax.tree.structure(splits[s]) != train or _row_spec(splits[s]) != _row_spec(
            splits["train"]
        ):
            raise ValueError(
                f"ModelTask.data[{s!r}] is not laid out like data['train']: its rows are "
                f"{_row_spec(splits[s])}, the train rows {_row_spec(splits['train'])} (path, "
                "shape after the example axis, dtype); every split needs the same leaves."
            )
    return splits


def _gather(split: PyTree, index: Any) -> PyTree:
    return jax.tree.map(lambda x: x[index], split)


def _num_examples(split: PyTree) -> int:
    return jax.tree.leaves(split)[0].shape[0]


@eqx.filter_jit
def _mean_initial_loss(task: "ModelTask", keys: Key[Array, " n"]) -> Scalar:
    return jnp.mean(jax.vmap(lambda k: task.loss(task.init(k), k))(keys))


def _initial_loss(task: "ModelTask") -> float:
    return float(_mean_initial_loss(task, jr.split(jr.key(0), 8)))


class ModelTask(AbstractTask):
    """Any Equinox model, a loss and data splits, as an inner problem.

    The learned optimizer sees only the model's floating-point arrays (its parameters); every
    other field (activation functions, integer buffers, sizes) is split off with
    `eqx.partition` and put back with `eqx.combine` inside the task. Minibatches of
    `batch_size` examples are drawn uniformly with replacement from the train split, in-graph.

    `init(key)` returns the parameters of `model`, or of `model(key)` when `model` is a
    function of a key (a fresh initialisation per inner problem, which meta-training prefers).
    The meta-objective clips the training loss to $[0, \\text{max\\_loss}]$ (NaN and
    $+\\infty$ map to the bound), so losses are expected to be non-negative.

    **Arguments:**

    - `model`: an `eqx.Module` (every initialisation starts from its parameters), or a
      function `key -> eqx.Module` that draws a fresh model.
    - `loss`: `loss(model, batch) -> scalar`, where `batch` is a minibatch of the data (the
      same pytree as a split, with `batch_size` rows). It should be a mean over the batch's
      examples: whole-split evaluation averages it over chunks.
    - `data`: `{"train": ..., "validation": ..., "test": ...}`, each a pytree of arrays
      (numpy or JAX) with one row per example along the leading axis; every split has the
      same leaves, and no NaN or infinite values. Converted to device arrays once.
    - `batch_size`: examples per minibatch, at most the size of the train split.
    - `name`: the task's name in configs, checkpoints and results (default: the model's
      class name); no `@`, `,` or `:`.
    - `eval_split`: the split `eval_loss` draws from, `"test"` (default) or `"validation"`.
    - `max_loss`: the bound of the normalised loss (default: 1.5 times the mean training loss
      at initialisation, measured once when the task is built).
    - `accuracy`: optionally `accuracy(model, batch) -> scalar`, the fraction of the batch
      predicted correctly, which [`elo.evaluate`][] then reports beside the loss.

    !!! example

        ```python
        model = lambda key: eqx.nn.MLP(1, 1, 32, 2, key=key)
        loss = lambda m, b: jnp.mean((jax.vmap(m)(b[0]) - b[1]) ** 2)
        task = elo.tasks.ModelTask(model, loss, {"train": (x, y), ...}, batch_size=32)
        ```
    """

    name: str = eqx.field(static=True)
    model: PyTree
    make_model: Callable[[PRNGKeyArray], PyTree] | None
    loss_fn: Callable[[PyTree, PyTree], Scalar]
    accuracy_fn: Callable[[PyTree, PyTree], Scalar] | None
    train: PyTree
    validation: PyTree
    test: PyTree
    batch_size: int = eqx.field(static=True)
    eval_split: Literal["validation", "test"] = eqx.field(static=True)
    max_loss: float = eqx.field(static=True)

    def __init__(
        self,
        model: PyTree | Callable[[PRNGKeyArray], PyTree],
        loss: Callable[[PyTree, PyTree], Scalar],
        data: Mapping[str, PyTree],
        *,
        batch_size: int = 64,
        name: str | None = None,
        eval_split: Literal["validation", "test"] = "test",
        max_loss: float | None = None,
        accuracy: Callable[[PyTree, PyTree], Scalar] | None = None,
    ):
        if not is_int_at_least(batch_size, 1):
            raise ValueError(
                f"ModelTask.batch_size must be a positive integer, got {batch_size!r}."
            )
        if eval_split not in ("validation", "test"):
            raise ValueError(
                f"ModelTask.eval_split must be 'validation' or 'test', got {eval_split!r}."
            )
        for field, fn in (("loss", loss), ("accuracy", accuracy)):
            if not (callable(fn) or (field == "accuracy" and fn is None)):
                raise ValueError(
                    f"ModelTask.{field} must be a function {field}(model, batch) -> scalar, got "
                    f"{type(fn).__name__}."
                )
        if isinstance(model, eqx.Module) or not callable(model):
            make_model = None
        else:
            make_model = model
            model = make_model(jr.key(0))
        if not jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)):
            raise ValueError(
                f"ModelTask.model ({type(model).__name__}) has no floating-point arrays to "
                "train; give an eqx.Module with parameters, or a function key -> eqx.Module."
            )
        if name is None:
            name = type(model).__name__
        if not isinstance(name, str) or not name or any(c in name for c in _NAME_FORBIDDEN):
            raise ValueError(
                f"ModelTask.name must be a non-empty string without '@', ',' or ':', got {name!r}."
            )
        splits = _check_data(data)
        num_train = _num_examples(splits["train"])
        if batch_size > num_train:
            raise ValueError(
                f"ModelTask.batch_size={batch_size} is larger than the train split "
                f"({num_train} examples), so every minibatch would repeat examples; pass "
                f"batch_size <= {num_train}."
            )
        self.name = name
        self.model = model
        self.make_model = make_model
        self.loss_fn = loss
        self.accuracy_fn = accuracy
        self.train, self.validation, self.test = (splits[s] for s in SPLITS)
        self.batch_size = batch_size
        self.eval_split = eval_split
        self._check_scalar("loss", loss)
        if accuracy is not None:
            self._check_scalar("accuracy", accuracy)
        if max_loss is None:
            self.max_loss = math.inf
            initial = _initial_loss(self)
            if not math.isfinite(initial):
                raise ValueError(
                    f"ModelTask's training loss at initialisation is {initial} on finite data: "
                    "the model or the loss computes a non-finite value (e.g. log(0)); fix it "
                    "(max_loss=... would not make the run finite)."
                )
            if initial <= 0:
                raise ValueError(
                    "ModelTask bounds the normalised loss by 1.5 times the training loss at "
                    f"initialisation, which is {initial} (not positive); pass max_loss=..., a "
                    "positive bound on the loss."
                )
            max_loss = 1.5 * initial
        elif not (is_finite_number(max_loss) and max_loss > 0):
            raise ValueError(f"ModelTask.max_loss must be a positive number, got {max_loss!r}.")
        self.max_loss = float(max_loss)

    def _check_scalar(self, field: str, fn: Callable) -> None:
        params = self.init(jr.key(0))
        out = eqx.filter_eval_shape(self._apply, fn, params, self.sample_batch(jr.key(0)))
        if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != ():
            got = f"shape {out.shape}" if isinstance(out, jax.ShapeDtypeStruct) else repr(out)
            raise ValueError(
                f"ModelTask.{field} must return a scalar, but on a batch of {self.batch_size} "
                f"examples it returned {got}; reduce it, e.g. with jnp.mean."
            )
        if not jnp.issubdtype(out.dtype, jnp.floating):
            raise ValueError(
                f"ModelTask.{field} must return a floating-point scalar, got dtype {out.dtype}."
            )

    def _apply(self, fn: Callable, params: Params, batch: PyTree) -> Any:
        _, static = eqx.partition(self.model, eqx.is_inexact_array)
        return fn(eqx.combine(params, static), batch)

    def split(self, name: Literal["train", "validation", "test"]) -> PyTree:
        """The data of one split.

        **Arguments:**

        - `name`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        The split's pytree of device arrays.
        """
        if name not in SPLITS:
            raise ValueError(f"Unknown split {name!r}; expected one of {SPLITS}.")
        return getattr(self, name)

    def init(self, key: PRNGKeyArray) -> Params:
        """The model's floating-point arrays: those of `model`, or of a fresh `model(key)`.

        **Arguments:**

        - `key`: a JAX PRNG key (unused when `model` is a module).

        **Returns:**

        The model with every non-float field set to `None` (see `eqx.partition`).
        """
        model = self.model if self.make_model is None else self.make_model(key)
        return eqx.filter(model, eqx.is_inexact_array)

    def sample_batch(self, key: PRNGKeyArray) -> PyTree:
        """A train minibatch of `batch_size` examples drawn from `key`.

        **Arguments:**

        - `key`: selects the minibatch (indices uniform with replacement).

        **Returns:**

        The train split's pytree with `batch_size` rows.
        """
        index = jr.randint(key, (self.batch_size,), 0, _num_examples(self.train))
        return _gather(self.train, index)

    def batch_loss(self, params: Params, batch: PyTree) -> Scalar:
        """The user's loss of the model with `params` on `batch`.

        **Arguments:**

        - `params`: as returned by `init`.
        - `batch`: a value returned by `sample_batch`.

        **Returns:**

        A float32 scalar.
        """
        return jnp.asarray(self._apply(self.loss_fn, params, batch), jnp.float32)

    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """The loss on a minibatch of the `eval_split` split.

        **Arguments:**

        - `params`: as returned by `init`.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """
        data = self.split(self.eval_split)
        index = jr.randint(key, (self.batch_size,), 0, _num_examples(data))
        return self.batch_loss(params, _gather(data, index))

    def evaluate(
        self, params: Params, split: Literal["train", "validation", "test"]
    ) -> tuple[Scalar, Scalar]:
        """The loss and accuracy over a whole split, walked in chunks of `batch_size` examples.

        Each chunk's values are weighted by its number of examples, which gives the means over
        the split when `loss` and `accuracy` are means over their batch's examples.

        **Arguments:**

        - `params`: as returned by `init`.
        - `split`: `"train"`, `"validation"` or `"test"`.

        **Returns:**

        `(loss, accuracy)`, two float32 scalars; the accuracy is NaN for a task built without
        an `accuracy` function.
        """
        data = self.split(split)
        n = _num_examples(data)
        size = min(self.batch_size, n)
        num_chunks, rest = divmod(n, size)

        def measure(chunk: PyTree) -> Float[Array, " 2"]:
            loss = self.batch_loss(params, chunk)
            if self.accuracy_fn is None:
                return jnp.stack([loss, jnp.full((), jnp.nan, jnp.float32)])
            accuracy = jnp.asarray(self._apply(self.accuracy_fn, params, chunk), jnp.float32)
            return jnp.stack([loss, accuracy])

        def body(total: Float[Array, " 2"], chunk: PyTree) -> tuple[Float[Array, " 2"], None]:
            return total + size * measure(chunk), None

        chunks = jax.tree.map(
            lambda x: x[: num_chunks * size].reshape(num_chunks, size, *x.shape[1:]), data
        )
        total, _ = jax.lax.scan(body, jnp.zeros((2,), jnp.float32), chunks)
        if rest:
            total = total + rest * measure(jax.tree.map(lambda x: x[num_chunks * size :], data))
        return total[0] / n, total[1] / n

    def normalize_loss(self, loss: Scalar) -> Scalar:
        """Clip the loss to $[0, \\text{max\\_loss}]$; NaN and $+\\infty$ map to the bound.

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar.
        """
        bound = self.max_loss
        return jnp.nan_to_num(jnp.clip(loss, 0.0, bound), nan=bound, posinf=bound, neginf=0.0)
