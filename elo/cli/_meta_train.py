"""`elo meta-train`: a resumable meta-training run in a directory."""

import argparse
import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.random as jr

from .. import distributed, presets
from .._checkpoint import (
    atomic_write,
    config_differences,
    load,
    remove_stale_temporaries,
    save,
)
from .._config import MetaConfig
from .._cpu import use_cpu_cores
from .._export import RUN_CHECKPOINT, save_optimizer
from .._meta_step import meta_step
from .._state import init, MetaState
from .._validation import validate
from ..tasks import get_task
from ._common import CLIError, parse_overrides


CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
BEST_OPTIMIZER = "best_optimizer.eqx"

DESCRIPTION = """\
Meta-train a learned optimizer from a preset, in a run directory that can be resumed.

The directory receives config.json (preset, seed and the full MetaConfig), metrics.jsonl (one
JSON object per outer step: step, seconds, meta_loss, task_loss, resets, buffer_resumes,
max_inner_step, alpha, nonfinite, ...) and checkpoint.eqx (written atomically every
--checkpoint-every steps and at the end). Running the same command again resumes from the last
checkpoint and reproduces the uninterrupted run exactly; a run killed at any moment loses at
most --checkpoint-every steps.

The logged meta-loss is that of the trajectories meta-training runs, which ELO fuses with the
expert's while alpha < 1. --validate-every K also trains the learned optimizer *alone* every K
outer steps on a meta-training task at parameter scales 0.1, 1 and 10 and scores it on that
task's validation split (never a test set); the records go to metrics.jsonl (lines with a
"validation" key) and the best-scoring optimizer so far to best_optimizer.eqx.

examples:
  elo meta-train --preset elo_small_fc_cpu --steps 200 --out runs/elo
  elo meta-train --preset pes_small_fc_cpu --steps 200 --out runs/pes --seed 1
  elo meta-train --preset elo_small_fc_cpu --validate-every 100 --out runs/elo
  elo meta-train --preset elo_small_fc_cpu --set num_particles=8 \\
      --set tasks=mlp-w32-d1_mnist-8x8x1,mlp-w32-d1_cifar10-8x8x3
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "meta-train",
        help="meta-train a learned optimizer (resumable, with checkpoints)",
        description=DESCRIPTION,
    )
    parser.add_argument(
        "--preset",
        required=True,
        metavar="NAME",
        help=f"the configuration to start from: {', '.join(presets.PRESETS)}",
    )
    parser.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="outer steps of the run (sets num_outer_steps, which also shapes the "
        "meta-learning-rate schedule; default: the preset's)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="the run directory (default: runs/PRESET-sSEED); an existing run is resumed",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="the run's seed (0)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a MetaConfig field, e.g. --set num_particles=8 (repeatable; lists are "
        "comma-separated; optional fields take 'none')",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=50,
        metavar="K",
        help="outer steps between checkpoints (50)",
    )
    parser.add_argument(
        "--cpu-devices",
        default="auto",
        metavar="N|auto",
        help="split the CPU into N JAX devices and shard the particles over them (auto: one per "
        "core, the fastest on a CPU; 1: one device using intra-op threads). Accelerators are "
        "unaffected. Not with --distributed, where ELO_LOCAL_DEVICE_COUNT sets it",
    )
    parser.add_argument(
        "--validate-every",
        type=int,
        default=0,
        metavar="K",
        help="every K outer steps (and at step 0), score the learned optimizer alone on a "
        "meta-validation problem and keep the best in best_optimizer.eqx (0: never)",
    )
    parser.add_argument(
        "--validate-steps",
        type=int,
        default=2000,
        metavar="N",
        help="training steps of each validation run (2000)",
    )
    parser.add_argument(
        "--validate-task",
        metavar="NAME",
        help="the validation task (default: the first meta-training task; its validation split "
        "is scored)",
    )
    parser.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run through jax.distributed (coordinator, process count and id "
        "from ELO_COORDINATOR_ADDRESS / ELO_NUM_PROCESSES / ELO_PROCESS_ID or Slurm/Open MPI); "
        "every process runs the same command, process 0 writes; checkpoints must be on a "
        "shared filesystem",
    )
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --distributed: exit with status 75 if an outer step takes longer (the first "
        "step, which compiles, gets 1800 s)",
    )
    parser.set_defaults(func=run)


def build_config(preset: str, steps: int | None, overrides: list[str]) -> MetaConfig:
    """The run's configuration from the command line (errors become [`CLIError`][])."""
    if preset not in presets.PRESETS:
        raise CLIError(f"unknown preset {preset!r}; known presets: {', '.join(presets.PRESETS)}.")
    fields = parse_overrides(overrides)
    if steps is not None:
        if steps < 1:
            raise CLIError(f"--steps must be a positive integer, got {steps}.")
        fields["num_outer_steps"] = steps
    try:
        return presets.get_preset(preset, **fields)
    except (TypeError, ValueError) as e:
        raise CLIError(str(e)) from None


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    """Non-finite floats become null, so every line is strict JSON."""
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()
    }


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The per-outer-step records of a metrics file (a torn last line is skipped)."""
    return [r for r in read_records(path) if "validation" not in r]


def read_validation(path: Path) -> list[dict[str, Any]]:
    """The validation records of a metrics file (written by `--validate-every`)."""
    return [r for r in read_records(path) if isinstance(r.get("validation"), dict)]


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every complete, valid record of a metrics file (a torn last line is skipped)."""
    records = []
    if not path.is_file():
        return records
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                record = json.loads(line)
            except ValueError:
                break
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
    return records


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep the records of steps `<= step` (those the checkpoint contains), atomically."""
    keep = [r for r in read_records(path) if r["step"] <= step]
    lines = [json.dumps(r, allow_nan=False).encode() + b"\n" for r in keep]
    atomic_write(path, lines)


def _check_run_dir(out: Path, record: dict[str, Any], config: MetaConfig) -> None:
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a directory.")
    config_path = out / CONFIG_FILE
    if not config_path.is_file():
        if out.is_dir() and any(p for p in out.iterdir() if not p.name.startswith(".")):
            raise CLIError(
                f"--out {out} is a non-empty directory without {CONFIG_FILE}; it is not an elo "
                "run directory. Choose another --out."
            )
        return
    try:
        saved = json.loads(config_path.read_text())
        saved_config = saved["config"]
        saved_seed = saved["seed"]
    except (OSError, ValueError, KeyError, TypeError):
        raise CLIError(f"{config_path} is unreadable or corrupt; choose another --out.") from None
    differences = config_differences(saved_config, config)
    if saved_seed != record["seed"]:
        differences.insert(0, f"seed: {saved_seed!r} (run directory) vs {record['seed']!r} (now)")
    if differences:
        joined = "; ".join(d.replace("(checkpoint)", "(run directory)") for d in differences)
        raise CLIError(
            f"{out} holds a run with different settings: {joined}. Use another --out, or the "
            "run's settings to resume it."
        )


def configure_cpu_devices(setting: str) -> None:
    """Apply `--cpu-devices` (see [`elo.use_cpu_cores`][]) before JAX starts.

    `auto` keeps a count the user already chose (`XLA_FLAGS`, `JAX_NUM_CPU_DEVICES`) and
    whatever JAX has if it has already started (e.g. when called from a notebook); an explicit
    count that cannot be applied is an error.
    """
    if setting == "auto":
        with contextlib.suppress(RuntimeError):
            use_cpu_cores()
        return
    count = int(setting) if setting.isascii() and setting.isdigit() else 0
    if count < 1:
        raise CLIError(f"--cpu-devices must be 'auto' or a positive integer, got {setting!r}.")
    try:
        use_cpu_cores(count)
    except RuntimeError as e:
        raise CLIError(str(e)) from None


def run(args: argparse.Namespace) -> int:
    if not args.distributed:
        configure_cpu_devices(args.cpu_devices)
    else:
        if args.cpu_devices != "auto":
            raise CLIError(
                "--cpu-devices does not combine with --distributed; set ELO_LOCAL_DEVICE_COUNT to "
                "choose each process's CPU devices."
            )
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
        logging.getLogger("elo").setLevel(logging.INFO)
        distributed.initialize()
    config = build_config(args.preset, args.steps, args.set)
    validation = _validation_settings(args, config)
    if args.checkpoint_every < 1:
        raise CLIError(
            f"--checkpoint-every must be a positive integer, got {args.checkpoint_every}."
        )
    out = Path(args.out) if args.out else Path("runs") / f"{args.preset}-s{args.seed}"
    record = {
        "preset": args.preset,
        "seed": args.seed,
        "config": config.to_dict(),
    }
    _check_run_dir(out, record, config)
    writer = jax.process_index() == 0
    checkpoint = out / RUN_CHECKPOINT
    metrics_path = out / METRICS_FILE
    if writer:
        out.mkdir(parents=True, exist_ok=True)
        for path in (checkpoint, metrics_path, out / CONFIG_FILE):
            remove_stale_temporaries(path)
        if not (out / CONFIG_FILE).is_file():
            atomic_write(out / CONFIG_FILE, [json.dumps(record, indent=2).encode() + b"\n"])

    key = jr.key(args.seed)
    init_key, run_key = jr.split(key)
    state = init(config, key=init_key)
    if checkpoint.is_file():
        state = load(checkpoint, like=state)
        print(f"Resuming {out} from outer step {int(state.step)}.", file=sys.stderr)
    start = int(state.step)
    total = config.num_outer_steps
    if writer:
        _truncate_metrics(metrics_path, start)
    if start >= total:
        print(f"{out}: the run is complete ({start} of {total} outer steps).")
        return 0
    timeout = args.step_timeout if args.distributed else None
    validator = None
    if validation is not None:
        validator = _Validator(out, *validation)
        if start == 0 and not any(r["step"] == 0 for r in read_validation(metrics_path)):
            validator(state, 0)
    return _loop(
        state,
        run_key,
        start,
        total,
        out,
        args.checkpoint_every,
        args.no_progress,
        timeout,
        validator,
    )


def _validation_settings(args: argparse.Namespace, config: MetaConfig) -> tuple | None:
    if args.validate_every < 0:
        raise CLIError(f"--validate-every must be 0 or positive, got {args.validate_every}.")
    if args.validate_every == 0:
        return None
    if args.validate_steps < 1:
        raise CLIError(f"--validate-steps must be a positive integer, got {args.validate_steps}.")
    if args.distributed:
        raise CLIError(
            "--validate-every does not combine with --distributed; validate the run's "
            "checkpoints afterwards with elo.validate."
        )
    task = args.validate_task or config.tasks[0]
    try:
        get_task(task, batch_size=config.batch_size, data_dir=config.data_dir)
    except (ValueError, FileNotFoundError) as e:
        raise CLIError(f"--validate-task: {e}") from None
    return args.validate_every, args.validate_steps, task, config


class _Validator:
    """Scores the learned optimizer alone every `every` outer steps, logs the result to
    metrics.jsonl and keeps the best-scoring optimizer in best_optimizer.eqx."""

    def __init__(self, out: Path, every: int, num_steps: int, task: str, config: MetaConfig):
        self.out, self.every, self.num_steps = out, every, num_steps
        self.task = get_task(task, batch_size=config.batch_size, data_dir=config.data_dir)
        scores = [r["validation"]["score"] for r in read_validation(out / METRICS_FILE)]
        self.best = min(scores) if scores else math.inf

    def due(self, step: int, total: int) -> bool:
        return step % self.every == 0 or step == total

    def __call__(self, state: MetaState, step: int, metrics_file: Any = None) -> float:
        started = time.perf_counter()
        result = validate(state.learned_optimizer, self.task, num_steps=self.num_steps)
        record = {"step": step, "seconds": time.perf_counter() - started}
        record["validation"] = result.to_dict()
        best = result.score < self.best
        if best:
            self.best = result.score
            save_optimizer(self.out / BEST_OPTIMIZER, state.learned_optimizer)
        record["best"] = best
        line = json.dumps(record, allow_nan=False) + "\n"
        if metrics_file is not None:
            metrics_file.write(line)
        else:
            with open(self.out / METRICS_FILE, "a") as f:
                f.write(line)
        return result.score


def _loop(
    state: MetaState,
    run_key: Any,
    start: int,
    total: int,
    out: Path,
    every: int,
    no_progress: bool,
    step_timeout: float | None = None,
    validator: "_Validator | None" = None,
) -> int:
    from tqdm.auto import tqdm

    writer = jax.process_index() == 0
    checkpoint = out / RUN_CHECKPOINT
    metrics_file = open(out / METRICS_FILE, "a") if writer else None
    bar = tqdm(
        total=total,
        initial=start,
        desc="meta-train",
        unit="step",
        disable=no_progress or not writer,
        dynamic_ncols=True,
        file=sys.stderr,
    )

    def save_now(step: int) -> None:
        if metrics_file is not None:
            metrics_file.flush()
            os.fsync(metrics_file.fileno())
        save(checkpoint, state)

    # SIGTERM (e.g. a scheduler's pre-emption) is handled like Ctrl-C: finish the step in
    # flight, checkpoint, exit. SIGKILL cannot be caught; atomic writes make it safe anyway.
    # With several processes one of them stopping alone would strand the others in the next
    # collective, so the handler is installed only for single-process runs.
    previous = signal.getsignal(signal.SIGTERM)
    in_main_thread = jax.process_count() == 1
    if in_main_thread:
        try:
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        except ValueError:
            in_main_thread = False
    watchdog = (
        distributed.StepWatchdog(step_timeout)
        if step_timeout is not None
        else contextlib.nullcontext()
    )
    step = start
    saved_at = start
    step = start
    saved_at = start
    dog = watchdog.__enter__()
    try:
        for t in range(start, total):
            started = time.perf_counter()
            with dog.step(t) if dog is not None else contextlib.nullcontext():
                new_state = meta_step(state, jr.fold_in(run_key, t))
                metrics = new_state.metrics.to_dict()
            line = _clean({"step": t + 1, "seconds": time.perf_counter() - started, **metrics})
            if metrics_file is not None:
                metrics_file.write(json.dumps(line, allow_nan=False) + "\n")
            # The metrics line is written before the state advances, so an interruption
            # anywhere leaves the file holding at least the checkpoint's steps.
            state, step = new_state, t + 1
            if validator is not None and validator.due(step, total):
                validator(state, step, metrics_file)
            bar.update(1)
            bar.set_postfix(meta_loss=f"{metrics['meta_loss']:.4f}", refresh=False)
            if step % every == 0 or step == total:
                save_now(step)
                saved_at = step
    except KeyboardInterrupt:
        bar.close()
        if saved_at != step:
            save_now(step)
        print(
            f"Interrupted at outer step {step}; checkpoint saved. Rerun the same command to "
            "resume.",
            file=sys.stderr,
        )
        return 130
    finally:
        watchdog.__exit__(None, None, None)
        bar.close()
        if metrics_file is not None:
            metrics_file.close()
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
    print(f"{out}: {total} outer steps done; checkpoint {checkpoint}.")
    return 0
