"""`elo meta-train --validate-every`: the learned optimizer alone, scored during meta-training."""

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from .._config import MetaConfig
from .._evaluation._meta_validation import validate
from .._files._optimizer_file import save_optimizer
from .._files._run_dir import BEST_OPTIMIZER, METRICS_FILE
from .._outer._state import MetaState
from ..tasks import AbstractTask, get_task
from ._common import CLIError
from ._metrics_file import read_validation
from ._task_factory import is_factory, load_factory_tasks


def validation_settings(
    args: argparse.Namespace, config: MetaConfig, tasks: list[AbstractTask] | None = None
) -> tuple | None:
    if args.validate_every < 0:
        raise CLIError(f"--validate-every must be 0 or positive, got {args.validate_every}.")
    if args.validate_every == 0:
        if args.validate_task is not None:
            raise CLIError("--validate-task applies with --validate-every K; add it.")
        return None
    if args.validate_steps < 1:
        raise CLIError(f"--validate-steps must be a positive integer, got {args.validate_steps}.")
    if args.distributed:
        raise CLIError(
            "--validate-every does not combine with --distributed; validate the run's "
            "checkpoints afterwards with elo.validate."
        )
    specs = [t for t in (args.validate_task or "").split(",") if t]
    if args.validate_task is not None and (not specs or len(set(specs)) != len(specs)):
        raise CLIError(
            f"--validate-task takes tasks separated by commas, each once; got "
            f"{args.validate_task!r}."
        )
    if not specs:
        if tasks is not None:
            return args.validate_every, args.validate_steps, (tasks[0],)
        specs = [config.tasks[0]]
    chosen = []
    for spec in specs:
        if is_factory(spec):
            chosen.extend(load_factory_tasks(spec))
            continue
        try:
            chosen.append(get_task(spec, batch_size=config.batch_size, data_dir=config.data_dir))
        except (ValueError, FileNotFoundError) as e:
            raise CLIError(f"--validate-task: {e}") from None
    return args.validate_every, args.validate_steps, tuple(chosen)


class Validator:
    """Scores the learned optimizer alone every `every` outer steps, logs the result to
    metrics.jsonl and keeps the best-scoring optimizer in best_optimizer.eqx.

    With several tasks the score is the mean of their scores (each a normalised loss on the
    task's validation split, so tasks of different kinds weigh alike) and the record keeps each
    task's result under `"per_task"`; with one task the record is that task's result.
    """

    def __init__(self, out: Path, every: int, num_steps: int, tasks: tuple[AbstractTask, ...]):
        self.out, self.every, self.num_steps = out, every, num_steps
        self.tasks = tasks
        scores = [r["validation"]["score"] for r in read_validation(out / METRICS_FILE)]
        self.best = min(scores) if scores else math.inf

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0 or step == total

    def __call__(self, state: MetaState, step: int, metrics_file: Any = None) -> float:
        started = time.perf_counter()
        results = [
            validate(state.learned_optimizer, task, num_steps=self.num_steps).to_dict()
            for task in self.tasks
        ]
        if len(results) == 1:
            validation = results[0]
        else:
            validation = {
                "task": ",".join(r["task"] for r in results),
                "num_steps": self.num_steps,
                "score": float(sum(r["score"] for r in results) / len(results)),
                "per_task": results,
            }
        record = {"step": step, "seconds": time.perf_counter() - started}
        record["validation"] = validation
        score = validation["score"]
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
