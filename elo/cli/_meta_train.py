"""`elo meta-train`: the command line of [`elo.meta_train`][]."""

import argparse
import contextlib
import logging
import math
import sys
from pathlib import Path
from typing import Any

from .. import (
    available_cores,
    distributed,
    meta_train,
    MetaConfig,
    presets,
    RunDirError,
    use_cpu_cores,
    ValidationSettings,
)
from .._checks import positive_numbers
from .._evaluation._meta_validation import DEFAULT_SCALES
from .._run._meta_train import MAX_SEED
from ..tasks import AbstractTask, get_task
from ._common import CLIError, parse_overrides
from ._task_factory import is_factory, load_factory_tasks, resolve_tasks, TASK_HELP


AUTO_CHECKS = 5
"""Checks over a run with `--validate-every auto` (the default), after step 0's..."""
AUTO_MIN_EVERY = 250
"""... but at least this many outer steps apart (a shorter run: step 0's and the last)."""

DESCRIPTION = """\
Meta-train a learned optimizer from a preset, in a run directory that can be resumed.

The directory receives config.json (preset, seed and the full MetaConfig), metrics.jsonl (one
JSON object per outer step: step, seconds, meta_loss, task_loss, resets, buffer_resumes,
max_inner_step, alpha, nonfinite, ...), checkpoint.eqx (written atomically every
--checkpoint-every steps and at the end) and sessions.jsonl (one record per start or resume: its
step, options, elo/jax versions and devices). Running the same command again resumes from the
last checkpoint and reproduces the uninterrupted run exactly; a run killed at any moment loses
at most --checkpoint-every steps. A directory without a checkpoint holds no run yet: a command with
other settings starts afresh there. A run cannot be extended (--steps shapes its schedules):
--init-from RUN starts a new run from RUN's learned optimizer instead.

The logged meta-loss is that of the trajectories meta-training runs, which ELO fuses with the
expert's while alpha < 1: the progress bar names the phase beside alpha (imitation at alpha = 0,
fused, alone at alpha = 1), and the meta-loss changes meaning with it, so its rise when the
learned optimizer takes over is no failure. What says whether meta-training works is the
validation score (val=, lower is better; best= the best so far): every K outer steps
(--validate-every K; by default 5 checks over the run, at least 250 outer steps apart, plus one
at step 0 and one at the last) the learned optimizer
trains a meta-training task *alone* at parameter scales 0.1, 1 and 10 and is scored on that
task's validation split (never a test set); the records go to metrics.jsonl (lines with a
"validation" key) and the best-scoring optimizer so far to best_optimizer.eqx. The run ends by
printing its phase, its scores and the 'elo evaluate' command that compares it with tuned AdamW.

examples:
  elo meta-train --preset elo_small_fc_cpu --steps 200 --out runs/elo
  elo meta-train --preset pes_small_fc_cpu --steps 200 --out runs/pes --seed 1
  elo meta-train --preset elo_small_fc_cpu --validate-every 100 --out runs/elo
  elo meta-train --preset elo_small_fc_cpu --validate-every 0 --out runs/elo-unvalidated
  elo meta-train --preset elo_small_fc_cpu --steps 400 --init-from runs/elo --out runs/elo-2
  elo meta-train --preset specialise --init-from pretrained:celo2_published \\
      --task mytasks:make_task --out runs/celo2-mine
  elo meta-train --preset elo_small_fc_cpu --set num_particles=8 \\
      --set tasks=mlp-w32-d1_mnist-8x8x1,mlp-w32-d1_cifar10-8x8x3
  elo meta-train --preset elo_small_fc_cpu --task mytasks:make_task \\
      --task mlp-w32-d1_mnist-8x8x1 --out runs/mine

--task (repeatable) gives the tasks as objects: config.json then records each as
name@fingerprint (its shapes), and the run resumes only with tasks of the same fingerprints.
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
        help=f"the configuration to start from: {', '.join(presets.PRESETS)}; or specialise "
        "(with --init-from: fine-tune that learned optimizer on your --task, its class and "
        "hyperparameters kept)",
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
        "--init-from",
        metavar="RUN",
        help="start the learned optimizer from the weights of RUN (a run directory, a checkpoint, "
        "an exported .eqx optimizer, or pretrained:NAME) instead of random ones; everything else "
        "starts afresh. The way to train on after a run has finished. Its class and "
        "hyperparameters must be the run's (see --init-weights-only)",
    )
    parser.add_argument(
        "--init-weights-only",
        action="store_true",
        help="with --init-from: take only its weights, and this run's hyperparameters (e.g. "
        "another schedule set with --set optimizer.peak_lr=...) where they differ; the "
        "network's shapes must match. What differs is printed",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a MetaConfig field, e.g. --set num_particles=8 (repeatable; lists are "
        "comma-separated; optional fields take 'none')",
    )
    parser.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="TASK",
        help=f"a meta-training task, instead of the preset's tasks (repeatable): {TASK_HELP}",
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
        default="auto",
        metavar="K|auto",
        help="every K outer steps (and at step 0 and the last), score the learned optimizer "
        "alone on a meta-validation problem and keep the best in best_optimizer.eqx (0: never; "
        f"auto: {AUTO_CHECKS} checks over the run, every ceil(steps/{AUTO_CHECKS}) outer steps "
        f"but at least {AUTO_MIN_EVERY}; never with --distributed)",
    )
    parser.add_argument(
        "--validate-steps",
        type=int,
        default=2000,
        metavar="N",
        help="training steps of each validation run (2000)",
    )
    parser.add_argument(
        "--validate-scales",
        metavar="S[,S...]",
        help="the parameter scales of each validation check, comma-separated (default "
        f"{','.join(f'{s:g}' for s in DEFAULT_SCALES)}: as meta-training augments; 1: the "
        "optimizer as users run it, at a third of the cost)",
    )
    parser.add_argument(
        "--validate-task",
        metavar="TASK[,TASK...]",
        help="the validation task, a name or package.module:factory (default: the first "
        "meta-training task; its validation split is scored); with several, comma-separated, "
        "the score is the mean of theirs",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="do not show the progress bar, nor the summary at the end",
    )
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


def build_config(
    preset: str, steps: int | None, overrides: list[str], init_from: str | None = None
) -> MetaConfig:
    """The run's configuration from the command line (errors become [`CLIError`][])."""
    if preset == "specialise" and init_from is None:
        raise CLIError(
            "--preset specialise fine-tunes a trained learned optimizer: name it with --init-from "
            "(e.g. --init-from pretrained:celo2_published)."
        )
    if preset not in presets.PRESETS and preset != "specialise":
        raise CLIError(
            f"unknown preset {preset!r}; known presets: {', '.join(presets.PRESETS)}, specialise."
        )
    fields = parse_overrides(overrides)
    if steps is not None:
        if steps < 1:
            raise CLIError(f"--steps must be a positive integer, got {steps}.")
        fields["num_outer_steps"] = steps
    try:
        if init_from is not None and preset == "specialise":
            return presets.specialise(init_from, **fields)
        return presets.get_preset(preset, **fields)
    except (TypeError, ValueError) as e:
        raise CLIError(str(e)) from None


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
    cores = available_cores()
    if count > cores:
        raise CLIError(
            f"--cpu-devices {count} is more than the {cores} CPU cores this process may use; "
            f"give at most {cores}, or auto (one device per core)."
        )
    try:
        use_cpu_cores(count)
    except RuntimeError as e:
        raise CLIError(str(e)) from None


def validate_every(setting: str, num_outer_steps: int, distributed: bool) -> int:
    """`--validate-every` as outer steps between checks (0: never).

    `auto` makes `AUTO_CHECKS` checks after step 0's, at least `AUTO_MIN_EVERY` outer steps
    apart. One check of the README's run (2000 steps at 3 scales and 2 seeds of
    `mlp-w32-d1_mnist-8x8x1`) costs about as much as 50 to 75 of its outer steps, plus a
    compilation about as long as the first outer step's: 5 checks add about a sixth to its 3000
    steps, and checks 250 steps apart at most about a quarter to a shorter run (see
    `docs/cli.md`). Runs with `--distributed`, where validation is refused, are not validated by
    default.
    """
    if setting == "auto":
        if distributed:
            return 0
        return max(math.ceil(num_outer_steps / AUTO_CHECKS), AUTO_MIN_EVERY)
    every = int(setting) if setting.isascii() and setting.isdigit() else -1
    if every < 0:
        raise CLIError(f"--validate-every must be 'auto', 0 or positive, got {setting!r}.")
    return every


def validation_settings(
    args: argparse.Namespace, config: MetaConfig, tasks: list[AbstractTask] | None = None
) -> ValidationSettings | None:
    """`--validate-*` as [`elo.ValidationSettings`][] (None with `--validate-every 0`)."""
    every = validate_every(args.validate_every, config.num_outer_steps, args.distributed)
    if every == 0:
        if args.validate_task is not None and args.distributed:
            raise CLIError("--validate-task does not combine with --distributed (no validation).")
        for flag, given in (
            ("--validate-task", args.validate_task),
            ("--validate-scales", args.validate_scales),
        ):
            if given is not None:
                raise CLIError(
                    f"{flag} applies only when the run validates, and --validate-every 0 "
                    "turns validation off; drop one of them."
                )
        return None
    if args.validate_steps < 1:
        raise CLIError(f"--validate-steps must be a positive integer, got {args.validate_steps}.")
    if args.distributed:
        raise CLIError(
            "--validate-every does not combine with --distributed; validate the run's "
            "checkpoints afterwards with elo.validate."
        )
    scales = (
        DEFAULT_SCALES if args.validate_scales is None else validate_scales(args.validate_scales)
    )
    specs = [t for t in (args.validate_task or "").split(",") if t]
    if args.validate_task is not None and (not specs or len(set(specs)) != len(specs)):
        raise CLIError(
            f"--validate-task takes tasks separated by commas, each once; got "
            f"{args.validate_task!r}."
        )
    chosen = []
    for spec in specs:
        if is_factory(spec):
            chosen.extend(load_factory_tasks(spec))
            continue
        try:
            chosen.append(get_task(spec, batch_size=config.batch_size, data_dir=config.data_dir))
        except (ValueError, FileNotFoundError) as e:
            raise CLIError(f"--validate-task: {e}") from None
    return ValidationSettings(every, args.validate_steps, tuple(chosen), scales)


def validate_scales(text: str) -> tuple[float, ...]:
    """`--validate-scales` as a tuple of positive numbers."""
    try:
        scales = positive_numbers([float(s) for s in text.split(",")])
    except ValueError:
        scales = None
    if scales is None:
        raise CLIError(
            f"--validate-scales takes positive numbers separated by commas (e.g. 1 or "
            f"0.1,1,10); got {text!r}."
        )
    return scales


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.seed <= MAX_SEED:
        raise CLIError(f"--seed must be an integer from 0 to {MAX_SEED}, got {args.seed}.")
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
    config = build_config(args.preset, args.steps, args.set, args.init_from)
    tasks = None
    if args.task:
        if any(item.partition("=")[0].strip() == "tasks" for item in args.set):
            raise CLIError("give the tasks either with --task or with --set tasks=..., not both.")
        tasks = resolve_tasks(args.task, batch_size=config.batch_size, data_dir=config.data_dir)
    validation = validation_settings(args, config, tasks)
    if args.checkpoint_every < 1:
        raise CLIError(
            f"--checkpoint-every must be a positive integer, got {args.checkpoint_every}."
        )
    out = Path(args.out) if args.out else Path("runs") / f"{args.preset}-s{args.seed}"
    record: dict[str, Any] = {"preset": args.preset}
    if tasks is not None:
        record["task"] = list(args.task)
    options = vars(args) | {"validate_every": 0 if validation is None else validation.every}
    try:
        meta_train(
            config,
            out,
            seed=args.seed,
            checkpoint_every=args.checkpoint_every,
            validation=validation,
            init_from=args.init_from,
            init_weights_only=args.init_weights_only,
            progress=not args.no_progress,
            tasks=tasks,
            step_timeout=args.step_timeout if args.distributed else None,
            run_record=record,
            session_options=options,
        )
    except RunDirError as e:
        raise CLIError(str(e)) from None
    except KeyboardInterrupt:
        return 130
    return 0
