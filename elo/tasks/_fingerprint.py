"""What identifies a task given as an object: its name and a fingerprint of its shapes."""

import dataclasses
import hashlib
import json
from typing import Any

import equinox as eqx
import jax
import jax.random as jr

from ._base import AbstractTask


def _spec(tree: Any) -> list[list[Any]]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return [
        [jax.tree_util.keystr(path), list(leaf.shape), str(leaf.dtype)]
        for path, leaf in leaves
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    ]


def task_name(task: AbstractTask) -> str:
    """The task's display name (every task declares `name`)."""
    return task.name


def task_fingerprint(task: AbstractTask) -> str:
    """A short hash of what a checkpoint of a run on `task` depends on.

    It covers the task's class and name, its static settings of plain non-float types (sizes,
    batch size, choices), the path, shape and dtype of every parameter that `init` returns and of
    every array the task holds (its data). It does not read the data's values, nor float
    settings (a loss bound measured on the data would move with float rounding from one machine
    to another): the same data loaded again, or data of the same shapes, give the same
    fingerprint.

    **Arguments:**

    - `task`: an [`elo.tasks.AbstractTask`][].

    **Returns:**

    Twelve hexadecimal digits.
    """
    settings = {
        f.name: getattr(task, f.name)
        for f in dataclasses.fields(task)
        if f.metadata.get("static", False)
        and isinstance(getattr(task, f.name), bool | int | str | type(None))
    }
    record = {
        "class": type(task).__qualname__,
        "name": task_name(task),
        "settings": settings,
        "params": _spec(eqx.filter_eval_shape(task.init, jr.key(0))),
        "arrays": _spec(eqx.filter(task, eqx.is_array)),
    }
    text = json.dumps(record, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def task_label(task: AbstractTask) -> str:
    """How `MetaConfig.tasks` records a task given as an object: `name@fingerprint` (see
    [`elo.tasks.task_fingerprint`][]).

    **Arguments:**

    - `task`: an [`elo.tasks.AbstractTask`][].

    **Returns:**

    A string such as `"sine@3f2a9c1b07de"`.
    """
    return f"{task_name(task)}@{task_fingerprint(task)}"
