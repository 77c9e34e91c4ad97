"""Learned optimizers meta-trained with `elo` and shipped inside the package.

Each is a small `.eqx` file (the format of [`elo.save_optimizer`][]) next to a JSON provenance
record: the command and commit that produced it, its configuration and budget, how it was
selected (on meta-validation, never on a test task) and its evaluation table. Loading reads the
package's own files: no network.
"""

import importlib.resources
import json
from typing import Any

from ._export import load_optimizer
from .optimizers._base import AbstractLearnedOptimizer


PRETRAINED_SCHEME = "pretrained:"
"""The prefix that names a shipped optimizer where the CLI expects a path, e.g.
`elo evaluate pretrained:small_fc_mnist8 ...`."""


def _directory():
    return importlib.resources.files("elo") / "pretrained"


def available_pretrained() -> dict[str, dict[str, Any]]:
    """The shipped learned optimizers and their provenance records.

    **Returns:**

    `{name: provenance}`, where `provenance` is the JSON record shipped with the weights
    (keys include `summary`, `command`, `commit`, `config`, `selection` and `evaluation`).
    """
    out = {}
    for entry in sorted(_directory().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[: -len(".json")]] = json.loads(entry.read_text())
    return out


def pretrained(name: str) -> AbstractLearnedOptimizer:
    """A learned optimizer meta-trained with `elo`, shipped inside the package.

    **Arguments:**

    - `name`: one of [`elo.available_pretrained`][]`()` (e.g. `"small_fc_mnist8"`).

    **Returns:**

    The learned optimizer (e.g. an [`elo.SmallFC`][]). Use it with
    [`elo.as_optax`][]`(lo, num_steps=N)` or [`elo.evaluate`][].

    **Raises:**

    `ValueError` for an unknown name (the message lists the shipped ones).

    !!! example

        ```python
        lo = elo.pretrained("small_fc_mnist8")
        opt = elo.as_optax(lo, num_steps=1000)
        print(elo.available_pretrained()["small_fc_mnist8"]["summary"])
        ```
    """
    known = available_pretrained()
    if name not in known:
        raise ValueError(
            f"Unknown pretrained optimizer {name!r}; shipped: {', '.join(known) or 'none'}."
        )
    with importlib.resources.as_file(_directory() / f"{name}.eqx") as path:
        return load_optimizer(path)
