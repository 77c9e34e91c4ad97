"""The learned optimizer alone, scored during meta-training (`validation=` of `elo.meta_train`)."""

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx

from .._checks import positive_numbers
from .._config import MetaConfig
from .._evaluation._meta_validation import DEFAULT_SCALES, validate
from .._files._optimizer_file import save_optimizer
from .._files._run_dir import BEST_OPTIMIZER, METRICS_FILE
from .._outer._state import MetaState
from ..tasks import AbstractTask, get_task
from ._metrics_file import read_validation


def _scales(value: Sequence[float]) -> Any:
    # Valid scales become a tuple of floats (a static field must hash; records show floats);
    # anything else stays as given, for `__check_init__` to refuse by name.
    checked = positive_numbers(value)
    return value if checked is None else checked


class ValidationSettings(eqx.Module):
    """How [`elo.meta_train`][] scores the learned optimizer alone while it meta-trains.

    Every `every` outer steps (and at step 0 and the last step) the learned optimizer trains
    each task on its own for `num_steps` steps, at each parameter scale of `scales`, and is scored
    on the task's validation split (never a test set; see [`elo.validate`][]). The record goes
    to `metrics.jsonl` (a line with a `"validation"` key) and the best-scoring optimizer so far
    to `best_optimizer.eqx`.

    **Arguments:**

    - `every`: outer steps between checks (positive).
    - `num_steps`: training steps of each check.
    - `tasks`: the validation tasks; with several, the score is the mean of theirs. Empty: the
      first meta-training task.
    - `scales`: the parameter scales of each check (default 0.1, 1 and 10, as meta-training
      augments; `(1.0,)` scores the optimizer as users run it, at a third of the cost).
    """

    every: int = eqx.field(static=True)
    num_steps: int = eqx.field(default=2000, static=True)
    tasks: tuple[AbstractTask, ...] = ()
    scales: tuple[float, ...] = eqx.field(default=DEFAULT_SCALES, static=True, converter=_scales)

    def __check_init__(self):
        for name in ("every", "num_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} = {value!r} is invalid: it must be a positive integer.")
        if positive_numbers(self.scales) is None:
            raise ValueError(
                f"scales = {self.scales!r} is invalid: it must be a non-empty tuple of "
                "positive numbers, e.g. (1.0,)."
            )


def validation_tasks(
    settings: ValidationSettings, config: MetaConfig, tasks: Sequence[AbstractTask] | None
) -> tuple[AbstractTask, ...]:
    """The tasks `settings` validates on: its own, else the run's first meta-training task."""
    if settings.tasks:
        return tuple(settings.tasks)
    if tasks:
        return (tasks[0],)
    return (get_task(config.tasks[0], batch_size=config.batch_size, data_dir=config.data_dir),)


class Validator:
    """Scores the learned optimizer alone every `every` outer steps, logs the result to
    metrics.jsonl and keeps the best-scoring optimizer in best_optimizer.eqx.

    With several tasks the score is the mean of their scores (each a normalised loss on the
    task's validation split, so tasks of different kinds weigh alike) and the record keeps each
    task's result under `"per_task"`; with one task the record is that task's result.
    """

    def __init__(self, out: Path, settings: ValidationSettings):
        if not settings.tasks:
            raise ValueError("Validator needs its tasks (see `validation_tasks`).")
        self.out, self.every, self.num_steps = out, settings.every, settings.num_steps
        self.tasks, self.scales = settings.tasks, settings.scales
        earlier = read_validation(out / METRICS_FILE)
        found = (self._incomparable(r["validation"]) for r in earlier)
        self._refusal = next((message for message in found if message), None)
        scores = [r["validation"]["score"] for r in earlier]
        self.best = min(scores) if scores else math.inf
        self.last: float | None = scores[-1] if scores else None

    def require_comparable(self) -> None:
        """Raise a `ValueError` when the run's earlier checks were made otherwise (another
        number of steps, other scales or tasks): their scores would be compared with this
        validator's. `elo.meta_train` calls it before resuming a run that has steps left."""
        if self._refusal is not None:
            raise ValueError(self._refusal)

    def _incomparable(self, validation: dict[str, Any]) -> str | None:
        """Why an earlier check's scores do not compare with this validator's, or None."""
        made = {
            "num_steps": validation.get("num_steps"),
            # Multi-task records before scales were recorded: the only scales there were.
            "scales": validation.get("scales", list(DEFAULT_SCALES)),
            "task": validation.get("task"),
        }
        here = {
            "num_steps": self.num_steps,
            "scales": list(self.scales),
            "task": ",".join(t.name for t in self.tasks),
        }
        differing = [k for k in made if made[k] != here[k]]
        if not differing:
            return None
        details = "; ".join(f"{k}: {made[k]!r} there, {here[k]!r} now" for k in differing)
        return (
            f"{self.out}: this run's earlier validation checks were made otherwise "
            f"({details}); resume it with the same validation settings (--validate-steps, "
            "--validate-scales, --validate-task), or start a new run with --init-from."
        )

    @property
    def scores(self) -> tuple[float, float] | None:
        """The last check's score and the best so far (None before the first check)."""
        return None if self.last is None else (self.last, self.best)

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0 or step == total

    def __call__(self, state: MetaState, step: int, metrics_file: Any = None) -> float:
        self.require_comparable()
        started = time.perf_counter()
        results = [
            validate(
                state.learned_optimizer, task, num_steps=self.num_steps, scales=self.scales
            ).to_dict()
            for task in self.tasks
        ]
        if len(results) == 1:
            validation = results[0]
        else:
            validation = {
                "task": ",".join(r["task"] for r in results),
                "num_steps": self.num_steps,
                "scales": list(self.scales),
                "score": float(sum(r["score"] for r in results) / len(results)),
                "per_task": results,
            }
        record = {"step": step, "seconds": time.perf_counter() - started}
        record["validation"] = validation
        score = validation["score"]
        self.last = score
        best = score < self.best
        if best:
            self.best = score
            save_optimizer(self.out / BEST_OPTIMIZER, state.learned_optimizer)
        record["best"] = best
        line = json.dumps(record, allow_nan=False) + "\n"
        if metrics_file is not None:
            metrics_file.write(line)
        else:
            with open(self.out / METRICS_FILE, "a") as f:
                f.write(line)
        return score
