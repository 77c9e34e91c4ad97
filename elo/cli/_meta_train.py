"""`elo meta-train`: a resumable meta-training run in a directory."""

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr

from .. import distributed, presets
from .._config import MetaConfig
from .._files._checkpoint import load, save
from .._files._framing import atomic_write, CheckpointError, remove_stale_temporaries
from .._files._optimizer_file import load_optimizer, optimizer_spec
from .._files._run_dir import BEST_OPTIMIZER, CONFIG_FILE, METRICS_FILE, RUN_CHECKPOINT
from .._outer._build import build_meta_optimizer, config_with_tasks
from .._outer._meta_step import meta_step
from .._outer._state import init, MetaState
from .._runtime._cpu import available_cores, use_cpu_cores
from .._runtime._mesh import particle_mesh, place
from ..tasks import AbstractTask
from ._common import CLIError, parse_overrides
from ._metrics_file import clean_record, read_validation, repair_metrics
from ._run_dir_guard import check_run_dir, locked, replace_earlier_start
from ._sessions import record_session
from ._task_factory import resolve_tasks, TASK_HELP
from ._validator import validation_settings, Validator


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
expert's while alpha < 1. --validate-every K also trains the learned optimizer *alone* every K
outer steps on a meta-training task at parameter scales 0.1, 1 and 10 and scores it on that
task's validation split (never a test set); the records go to metrics.jsonl (lines with a
"validation" key) and the best-scoring optimizer so far to best_optimizer.eqx.

examples:
  elo meta-train --preset elo_small_fc_cpu --steps 200 --out runs/elo
  elo meta-train --preset pes_small_fc_cpu --steps 200 --out runs/pes --seed 1
  elo meta-train --preset elo_small_fc_cpu --validate-every 100 --out runs/elo
  elo meta-train --preset elo_small_fc_cpu --steps 400 --init-from runs/elo --out runs/elo-2
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
        "--init-from",
        metavar="RUN",
        help="start the learned optimizer from the weights of RUN (a run directory, a checkpoint "
        "or an exported .eqx optimizer) instead of random ones; everything else starts afresh. "
        "The way to train on after a run has finished",
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
        metavar="TASK[,TASK...]",
        help="the validation task, a name or package.module:factory (default: the first "
        "meta-training task; its validation split is scored); with several, comma-separated, "
        "the score is the mean of theirs",
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


def _init_from_path(source: str | None, out: Path) -> Path | None:
    """`--init-from` as an absolute path; it must exist unless `out` has a checkpoint to resume
    (which holds the weights, so the source may since have moved)."""
    if source is None:
        return None
    if not Path(source).exists() and not (out / RUN_CHECKPOINT).is_file():
        raise CLIError(
            f"--init-from {source} does not exist; give a run directory, a checkpoint or an "
            "exported .eqx optimizer."
        )
    return Path(source).resolve()


def _initialised_from(state: MetaState, source: Path) -> MetaState:
    """`state` with the learned optimizer's weights of `source` and a fresh meta-optimizer."""
    try:
        lo = load_optimizer(source)
    except CheckpointError as e:
        raise CLIError(f"--init-from: {e}") from None
    ours, theirs = optimizer_spec(state.learned_optimizer), optimizer_spec(lo)
    if ours != theirs:
        if ours["class"] != theirs["class"]:
            what = [f"class: {theirs['class']} (--init-from) vs {ours['class']} (this run)"]
        else:
            a, b = theirs["hyperparameters"], ours["hyperparameters"]
            what = [
                f"{k}: {a.get(k)!r} (--init-from) vs {b.get(k)!r} (this run)"
                for k in sorted(set(a) | set(b))
                if a.get(k) != b.get(k)
            ]
        raise CLIError(
            f"--init-from {source} holds another learned optimizer than this run's: "
            f"{'; '.join(what)}. Initialise from a run with the same learned optimizer."
        )
    mesh = particle_mesh(state.config)
    theta, static = eqx.partition(lo, eqx.is_inexact_array)
    theta = place(theta, mesh, sharded=False)
    meta_opt_state = place(build_meta_optimizer(state.config).init(theta), mesh, sharded=False)
    return eqx.tree_at(
        lambda s: (s.learned_optimizer, s.meta_opt_state),
        state,
        (eqx.combine(theta, static), meta_opt_state),
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


# JAX makes a key from the low 32 bits of a seed: seeds that differ above them share a key.
MAX_SEED = 2**32 - 1


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
    config = build_config(args.preset, args.steps, args.set)
    tasks = None
    if args.task:
        if any(item.partition("=")[0].strip() == "tasks" for item in args.set):
            raise CLIError("give the tasks either with --task or with --set tasks=..., not both.")
        tasks = resolve_tasks(args.task, batch_size=config.batch_size, data_dir=config.data_dir)
        try:
            config = config_with_tasks(config, tasks)
        except (TypeError, ValueError) as e:
            raise CLIError(f"--task: {e}") from None
    validation = validation_settings(args, config, tasks)
    if args.checkpoint_every < 1:
        raise CLIError(
            f"--checkpoint-every must be a positive integer, got {args.checkpoint_every}."
        )
    out = Path(args.out) if args.out else Path("runs") / f"{args.preset}-s{args.seed}"
    init_from = _init_from_path(args.init_from, out)
    record: dict[str, Any] = {
        "preset": args.preset,
        "seed": args.seed,
        "config": config.to_dict(),
    }
    if init_from is not None:
        record["init_from"] = str(init_from)
    if tasks is not None:
        record["task"] = list(args.task)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {out} exists and is not a directory.")
    writer = jax.process_index() == 0
    with locked(out) if writer else contextlib.nullcontext():
        return _run(args, out, record, config, validation, init_from, tasks)


def _run(
    args: argparse.Namespace,
    out: Path,
    record: dict[str, Any],
    config: MetaConfig,
    validation: tuple | None,
    init_from: Path | None,
    tasks: list[AbstractTask] | None = None,
) -> int:
    kind, earlier = check_run_dir(out, record, config)
    writer = jax.process_index() == 0
    checkpoint = out / RUN_CHECKPOINT
    metrics_path = out / METRICS_FILE
    if writer:
        for path in (checkpoint, metrics_path, out / CONFIG_FILE, out / BEST_OPTIMIZER):
            remove_stale_temporaries(path)

    key = jr.key(args.seed)
    init_key, run_key = jr.split(key)
    state = init(config, key=init_key, tasks=tasks)
    if checkpoint.is_file():
        state = load(checkpoint, like=state)
    elif init_from is not None:
        state = _initialised_from(state, init_from)
    start = int(state.step)
    total = config.num_outer_steps
    # config.json is written only now, once the run could start: a command that failed before
    # leaves nothing that would refuse the corrected one.
    if writer:
        if kind == "replace":
            replace_earlier_start(out, earlier)
        if kind != "resume":
            atomic_write(out / CONFIG_FILE, [json.dumps(record, indent=2).encode() + b"\n"])
        if kind == "recover":
            print(
                f"{out}: {CONFIG_FILE} was lost; rebuilt it from {checkpoint}'s header, which "
                f"does not record the seed (--seed {args.seed} is assumed).",
                file=sys.stderr,
            )
        repair_metrics(metrics_path, start)
        if start < total:
            record_session(out, start, args)
    if 0 < start < total:
        print(f"Resuming {out} from outer step {start} of {total}.", file=sys.stderr)
    validator = None
    if validation is not None:
        validator = Validator(out, *validation)
        # A check due at the step the run starts from is made now when the metrics lack it:
        # step 0 of a new run, or a check that an interruption cut short (the checkpoint of
        # its step is saved on the way out, so the resumed loop would never come back to it).
        checked = any(r["step"] == start for r in read_validation(metrics_path))
        if validator.due(start, total) and not checked:
            if start > 0:
                print(f"Making outer step {start}'s check, which was cut short.", file=sys.stderr)
            validator(state, start)
    if start >= total:
        print(
            f"{out}: the run is complete ({start} of {total} outer steps). To train on from its "
            f"learned optimizer, start a new run with --init-from {out}."
        )
        return 0
    timeout = args.step_timeout if args.distributed else None
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


@contextlib.contextmanager
def _signals_ignored(in_main_thread: bool):
    """Ctrl-C and SIGTERM ignored for the duration: a repeated one must not abort the
    checkpoint that the first one asked for."""
    if not in_main_thread:
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _loop(
    state: MetaState,
    run_key: Any,
    start: int,
    total: int,
    out: Path,
    every: int,
    no_progress: bool,
    step_timeout: float | None = None,
    validator: "Validator | None" = None,
) -> int:
    from tqdm.auto import tqdm

    writer = jax.process_index() == 0
    checkpoint = out / RUN_CHECKPOINT
    metrics_file = open(out / METRICS_FILE, "a") if writer else None

    def progress(initial: int, desc: str, *, leave: bool) -> Any:
        return tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit="step",
            leave=leave,
            disable=no_progress or not writer,
            dynamic_ncols=True,
            file=sys.stderr,
        )

    # The first step compiles (seconds to minutes): a rate that counted it would promise hours
    # for a run of minutes, so the bar that estimates the time left starts after it.
    bar = progress(start, "meta-train (compiling)", leave=False)

    def save_now() -> None:
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
    with watchdog as dog:
        try:
            for t in range(start, total):
                started = time.perf_counter()
                with dog.step(t) if dog is not None else contextlib.nullcontext():
                    new_state = meta_step(state, jr.fold_in(run_key, t))
                    metrics = new_state.metrics.to_dict()
                line = clean_record(
                    {"step": t + 1, "seconds": time.perf_counter() - started, **metrics}
                )
                if metrics_file is not None:
                    metrics_file.write(json.dumps(line, allow_nan=False) + "\n")
                # The metrics line is written before the state advances, so an interruption
                # anywhere leaves the file holding at least the checkpoint's steps.
                state, step = new_state, t + 1
                if validator is not None and validator.due(step, total):
                    validator(state, step, metrics_file)
                if t == start:
                    bar.close()
                    bar = progress(step, "meta-train", leave=True)
                else:
                    bar.update(1)
                bar.set_postfix(meta_loss=f"{metrics['meta_loss']:.4f}", refresh=False)
                if step % every == 0 or step == total:
                    save_now()
                    saved_at = step
        except KeyboardInterrupt:
            bar.close()
            if saved_at != step:
                with _signals_ignored(in_main_thread):
                    save_now()
                done = f"checkpoint saved at outer step {step}"
            elif step > 0:
                done = f"the checkpoint of outer step {step} is up to date"
            else:
                done = "no checkpoint was written yet"
            again = "resume" if step > 0 else "start again"
            print(
                f"Interrupted at outer step {step}; {done}. Rerun the same command to {again}.",
                file=sys.stderr,
            )
            return 130
        finally:
            bar.close()
            if metrics_file is not None:
                metrics_file.close()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
    print(f"{out}: {total} outer steps done; checkpoint {checkpoint}.")
    return 0
