"""`elo.TuningCache`: the evaluations of a tuning in progress, one JSON file per value."""

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._evaluation._evaluate import Evaluation
from .._evaluation._tuning import AbstractTuningCache
from ._framing import atomic_write


TUNING_VALUE_FORMAT = "elo-tuning-value"
TUNING_VALUE_VERSION = 1


class TuningCache(AbstractTuningCache):
    """A directory in which [`elo.tune`][] keeps each value's evaluation as soon as it is made
    (one JSON file per value, written atomically), so that a tuning stopped part-way resumes
    with the values it had not finished.

    **Arguments:**

    - `directory`: the directory (created when the first value is stored). Give each tuning
      its own: a value stored there by a tuning with other arguments (another optimizer, task,
      number of steps, seeds, ...) is refused with an error that says which differ.

    !!! example

        ```python
        cache = elo.TuningCache("tuning/adamw_mlp")
        tuned = elo.tune("adamw", "mlp-w32-d1_mnist-8x8x1", num_steps=1000, cache=cache)
        # Killed half-way? The same call trains only the values that were not finished.
        ```
    """

    directory: str

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)

    def _path(self, value: float) -> Path:
        if not math.isfinite(value):
            raise ValueError(f"a tuned value must be finite, got {value!r}.")
        return Path(self.directory) / f"value_{value!r}.json"

    def load(self, key: Mapping[str, Any], value: float) -> Evaluation | None:
        """The evaluation stored for `value` under `key`, None when there is none; a
        `ValueError` naming the file for one that is unreadable or made with another key."""
        path = self._path(value)
        if not path.is_file():
            return None
        try:
            document = json.loads(path.read_text())
            if document.get("format") != TUNING_VALUE_FORMAT:
                raise ValueError(f"it is not an {TUNING_VALUE_FORMAT} file")
            if document.get("version") != TUNING_VALUE_VERSION:
                raise ValueError(f"version {document.get('version')!r} is not readable here")
            stored_key, evaluation = document["key"], document["evaluation"]
            result = Evaluation.from_dict(evaluation)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"{path} cannot be read ({e}); delete it and the tuning makes that value again."
            ) from None
        wanted = json.loads(json.dumps(dict(key)))
        if stored_key != wanted:
            differing = sorted(
                k for k in {*stored_key, *wanted} if stored_key.get(k) != wanted.get(k)
            )
            details = "; ".join(
                f"{k}: {stored_key.get(k)!r} there, {wanted.get(k)!r} here" for k in differing
            )
            raise ValueError(
                f"{path} holds a value of another tuning ({details}). Give this tuning its own "
                "TuningCache directory, or delete that one to start again."
            )
        return result

    def save(self, key: Mapping[str, Any], value: float, result: Evaluation) -> None:
        """Store `result` for `value` under `key`, atomically."""
        document = {
            "format": TUNING_VALUE_FORMAT,
            "version": TUNING_VALUE_VERSION,
            "key": dict(key),
            "value": value,
            "evaluation": result.to_dict(),
        }
        atomic_write(self._path(value), [json.dumps(document, allow_nan=False).encode()])
