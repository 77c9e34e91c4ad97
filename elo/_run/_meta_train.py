"""`meta_train`: a resumable, locked, checkpointed meta-training run in a directory."""

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr

from .._config import MetaConfig
from .._files._checkpoint import load, save
from .._files._framing import atomic_write, CheckpointError, remove_stale_temporaries
from .._files._optimizer_file import optimizer_spec
from .._files._pretrained import pretrained, PRETRAINED_SCHEME
from .._files._run_dir import (
    BEST_OPTIMIZER,
    CONFIG_FILE,
    METRICS_FILE,
    RUN_CHECKPOINT,
    RunDirError,
)
from .._outer._build import build_meta_optimizer, config_with_tasks
from .._outer._meta_step import meta_step
from .._outer._state import init, MetaState
from .._runtime._mesh import particle_mesh, place
from ..optimizers import AbstractLearnedOptimizer
from ..tasks import AbstractTask
from ._lock import check_run_dir, locked, replace_earlier_start
from ._metrics_file import clean_record, read_metrics, read_validation, repair_metrics
from ._report import progress_postfix, run_summary, supervision_phase
from ._sessions import record_session
from ._validator import validation_tasks, ValidationSettings, Validator
from ._watchdog import StepWatchdog


# JAX makes a key from the low 32 bits of a seed: seeds that differ above them share a key.
MAX_SEED = 2**32 - 1


def meta_train(
    config: MetaConfig,
    out: str | Path,
    *,
    seed: int,
    checkpoint_every: int,
    validation: ValidationSettings | None = None,
    init_from: str | Path | None = None,
    init_weights_only: bool = False,
    progress: bool = True,
    tasks: Sequence[AbstractTask] | None = None,
    step_timeout: float | None = None,
    run_record: Mapping[str, Any] | None = None,
    session_options: Mapping[str, Any] | None = None,
) -> MetaState:
    """Meta-train a learned optimizer in a run directory that can be resumed.

    This is `elo meta-train` as a function: it runs [`elo.init`][] and then
    `config.num_outer_steps` calls of [`elo.meta_step`][] (outer step `t` with key
    `fold_in(k, t)`, where `init_key, k = split(key(seed))`), and keeps the run in `out`:

    - `config.json`: the seed, `init_from` and the full `MetaConfig`;
    - `metrics.jsonl`: one record per outer step ([`elo.read_metrics`][]), and the validation
      records ([`elo.read_validation`][]);
    - `checkpoint.eqx`: the `MetaState`, written atomically every `checkpoint_every` steps and
      at the end;
    - `sessions.jsonl`: one record per start or resume, with [`elo.environment`][]
      ([`elo.read_sessions`][]);
    - `best_optimizer.eqx`: with `validation`, the best-scoring learned optimizer so far.

    Calling it again with the same arguments resumes from the last checkpoint and reproduces the
    uninterrupted run exactly; a run killed at any moment loses at most `checkpoint_every`
    steps. Ctrl-C or SIGTERM finishes the step in flight, saves a checkpoint and raises
    `KeyboardInterrupt` (a SIGTERM handler that the caller installed is left in place: raising
    `KeyboardInterrupt` from it stops the run the same way). One process at a time may use
    `out` (a lock). A run cannot be extended (`num_outer_steps` shapes the schedules): start a
    new one with `init_from`.

    With several JAX processes ([`elo.distributed.initialize`][]) every process calls it alike
    and process 0 writes; `out` must then be on a shared filesystem.

    **Arguments:**

    - `config`: the run's configuration; it runs `config.num_outer_steps` outer steps.
    - `out`: the run directory; created if missing, resumed if it holds this run.
    - `seed`: the run's seed, from 0 to $2^{32} - 1$.
    - `checkpoint_every`: outer steps between checkpoints.
    - `validation`: score the learned optimizer alone during the run (see
      [`elo.ValidationSettings`][]); None: never.
    - `init_from`: start the learned optimizer from the weights of this run directory,
      checkpoint or exported optimizer, or of `"pretrained:NAME"` (any `NAME` that
      [`elo.pretrained`][] loads, e.g. `"pretrained:celo2_published"`), instead of random ones
      (everything else starts afresh). Its class and hyperparameters must be the run's
      (`config.optimizer`, `config.optimizer_settings`; [`elo.presets.specialise`][] builds a
      config that matches a shipped optimizer).
    - `init_weights_only`: with `init_from`, take only its weights and keep the run's own
      hyperparameters where they differ (the schedule, weight decay, ...); the class and the
      shapes of the weights must still match. What differs is printed on stderr and the run's
      `config.json` records the choice.
    - `progress`: show a progress bar on stderr: $\alpha$ with the phase of the supervision
      (`imitation` at $\alpha = 0$, `fused`, `alone` at $\alpha = 1$; `alone` throughout
      without an expert, `alternating` for CL), the last and best validation scores (`val=`,
      `best=`, with `validation`) and the meta-loss; at the end print a summary: the phase
      reached, the validation scores and the `elo evaluate` command that compares the run's
      learned optimizer with tuned AdamW.
    - `tasks`: task objects to meta-train on instead of `config.tasks`; `config.json` records
      each as `name@fingerprint`, and the run resumes only with tasks of the same fingerprints.
    - `step_timeout`: seconds an outer step may take before the process exits with status 75
      ([`elo.distributed.StepWatchdog`][]); None: no bound.
    - `run_record`: more JSON fields for `config.json` (the CLI records `preset` and `task`).
    - `session_options`: what `sessions.jsonl` records as this start's options (default: this
      call's scalar arguments).

    **Returns:**

    The `MetaState` after the last outer step (of a run that was already complete: its
    checkpoint).

    **Raises:**

    [`elo.RunDirError`][] when `out` is in use by another run or holds another run (the message
    says what to do); `ValueError` for invalid arguments.

    !!! example
        ```python
        import elo

        config = elo.presets.elo_small_fc_cpu(num_outer_steps=200)
        state = elo.meta_train(config, "runs/elo", seed=0, checkpoint_every=50)
        elo.save_optimizer("small_fc.eqx", state.learned_optimizer)
        ```
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed = {seed!r} is invalid: it must be an integer from 0 to {MAX_SEED}.")
    every = checkpoint_every
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"checkpoint_every = {every!r} is invalid: it must be a positive integer.")
    if validation is not None and jax.process_count() > 1:
        raise ValueError(
            "validation does not combine with several processes; validate the run's "
            "checkpoints afterwards with elo.validate."
        )
    out = Path(out)
    if tasks is not None:
        tasks = list(tasks)
        config = config_with_tasks(config, tasks)
    if validation is not None:
        chosen = validation_tasks(validation, config, tasks)
        validation = ValidationSettings(
            validation.every, validation.num_steps, chosen, validation.scales
        )
    if not isinstance(init_weights_only, bool):
        raise ValueError(f"init_weights_only = {init_weights_only!r} is invalid: True or False.")
    if init_weights_only and init_from is None:
        raise ValueError(
            "init_weights_only=True (--init-weights-only) needs init_from (--init-from): the "
            "weights to start from."
        )
    source = _init_from_source(init_from, out)
    record: dict[str, Any] = dict(run_record or {})
    record |= {"seed": seed, "config": config.to_dict()}
    if source is not None:
        record["init_from"] = str(source)
    if init_weights_only:
        record["init_weights_only"] = True
    if session_options is None:
        session_options = dict(
            seed=seed,
            checkpoint_every=checkpoint_every,
            init_from=None if source is None else str(source),
            init_weights_only=init_weights_only,
            progress=progress,
            step_timeout=step_timeout,
            validate_every=None if validation is None else validation.every,
        )
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory; choose another run directory.")
    with locked(out) if jax.process_index() == 0 else contextlib.nullcontext():
        return _run(
            out, record, config, seed, every, validation, source, init_weights_only, tasks,
            progress, step_timeout, session_options,
        )  # fmt: skip


def _init_from_source(source: str | Path | None, out: Path) -> str | Path | None:
    """`init_from` as an absolute path, or as given for `pretrained:NAME`; a path must exist
    unless `out` has a checkpoint to resume (which holds the weights, so the source may since
    have moved)."""
    if source is None:
        return None
    if isinstance(source, str) and source.startswith(PRETRAINED_SCHEME):
        if not (out / RUN_CHECKPOINT).is_file():
            _load_source(source)  # an unknown name fails before the run directory is made
        return source
    if not Path(source).exists() and not (out / RUN_CHECKPOINT).is_file():
        raise RunDirError(
            f"init_from (--init-from) {source} does not exist; give a run directory, a "
            f"checkpoint, an exported .eqx optimizer or {PRETRAINED_SCHEME}NAME."
        )
    return Path(source).resolve()


def _hyperparameter_differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """What differs between two learned optimizers' `optimizer_spec`s, one item each."""
    if ours["class"] != theirs["class"]:
        return [f"class: {theirs['class']} (init_from) vs {ours['class']} (this run)"]
    a, b = theirs["hyperparameters"], ours["hyperparameters"]
    return [
        f"{k}: {a.get(k)!r} (init_from) vs {b.get(k)!r} (this run)"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def _load_source(source: str | Path) -> AbstractLearnedOptimizer:
    """The learned optimizer `init_from` names (errors become `RunDirError`)."""
    try:
        if isinstance(source, str) and source.startswith(PRETRAINED_SCHEME):
            return pretrained(source[len(PRETRAINED_SCHEME) :])
        return pretrained(Path(source))
    except (CheckpointError, ValueError) as e:
        raise RunDirError(f"init_from (--init-from): {e}") from None


def _shapes(weights: Any) -> list[tuple[Any, tuple[int, ...]]]:
    """Each array's path and shape (a tree structure would also compare static fields, which
    hold hyperparameters)."""
    return [(path, leaf.shape) for path, leaf in jax.tree.leaves_with_path(weights)]


def _initialised_from(state: MetaState, source: str | Path, weights_only: bool) -> MetaState:
    """`state` with the learned optimizer's weights of `source` and a fresh meta-optimizer;
    with `weights_only`, the run's own hyperparameters where they differ."""
    lo = _load_source(source)
    ours, theirs = optimizer_spec(state.learned_optimizer), optimizer_spec(lo)
    differences = _hyperparameter_differences(ours, theirs) if ours != theirs else []
    theta, static = eqx.partition(lo, eqx.is_inexact_array)
    if differences and weights_only and ours["class"] == theirs["class"]:
        our_theta, static = eqx.partition(state.learned_optimizer, eqx.is_inexact_array)
        if _shapes(theta) != _shapes(our_theta):
            raise RunDirError(
                f"init_from (--init-from) {source}: its weights have other shapes than this "
                f"run's learned optimizer ({'; '.join(differences)}), so they cannot be "
                "carried over; keep the hyperparameters that shape the network (hidden_size, "
                "the decays) as they are in init_from."
            )
        theta = jax.tree.unflatten(jax.tree.structure(our_theta), jax.tree.leaves(theta))
        if jax.process_index() == 0:
            print(
                f"init_from {source}: its weights with this run's hyperparameters "
                f"(init_weights_only): {'; '.join(differences)}.",
                file=sys.stderr,
            )
    elif differences:
        hint = (
            " To keep only its weights and this run's hyperparameters, add init_weights_only="
            "True (--init-weights-only)."
            if ours["class"] == theirs["class"]
            else " Initialise from a run with the same learned optimizer."
        )
        raise RunDirError(
            f"init_from (--init-from) {source} holds another learned optimizer than this run's: "
            f"{'; '.join(differences)}.{hint} elo.presets.specialise builds a config whose "
            "learned optimizer matches a shipped one."
        )
    mesh = particle_mesh(state.config)
    theta = place(theta, mesh, sharded=False)
    meta_opt_state = place(build_meta_optimizer(state.config).init(theta), mesh, sharded=False)
    return eqx.tree_at(
        lambda s: (s.learned_optimizer, s.meta_opt_state),
        state,
        (eqx.combine(theta, static), meta_opt_state),
    )


def _run(
    out: Path,
    record: dict[str, Any],
    config: MetaConfig,
    seed: int,
    every: int,
    validation: ValidationSettings | None,
    init_from: str | Path | None,
    init_weights_only: bool,
    tasks: list[AbstractTask] | None,
    progress: bool,
    step_timeout: float | None,
    session_options: Mapping[str, Any],
) -> MetaState:
    kind, earlier = check_run_dir(out, record, config)
    writer = jax.process_index() == 0
    checkpoint = out / RUN_CHECKPOINT
    metrics_path = out / METRICS_FILE
    if writer:
        for path in (checkpoint, metrics_path, out / CONFIG_FILE, out / BEST_OPTIMIZER):
            remove_stale_temporaries(path)

    init_key, run_key = jr.split(jr.key(seed))
    state = init(config, key=init_key, tasks=tasks)
    if checkpoint.is_file():
        state = load(checkpoint, like=state)
    elif init_from is not None:
        state = _initialised_from(state, init_from, init_weights_only)
    start = int(state.step)
    total = config.num_outer_steps
    # config.json is written only now, once the run could start: a call that failed before
    # leaves nothing that would refuse the corrected one.
    if writer:
        if kind == "replace":
            replace_earlier_start(out, earlier)
        if kind != "resume":
            atomic_write(out / CONFIG_FILE, [json.dumps(record, indent=2).encode() + b"\n"])
        if kind == "recover":
            print(
                f"{out}: {CONFIG_FILE} was lost; rebuilt it from {checkpoint}'s header, which "
                f"does not record the seed (--seed {seed} is assumed).",
                file=sys.stderr,
            )
        repair_metrics(metrics_path, start)
        if start < total:
            record_session(out, start, session_options)
    if 0 < start < total:
        print(f"Resuming {out} from outer step {start} of {total}.", file=sys.stderr)
    validator = None
    if validation is not None:
        validator = Validator(out, validation)
        if start < total:  # rerunning a complete run only repeats its summary
            validator.require_comparable()
        # A check due at the step the run starts from is made now when the metrics lack it:
        # step 0 of a new run, or a check that an interruption cut short (the checkpoint of
        # its step is saved on the way out, so the resumed loop would never come back to it).
        checked = any(r["step"] == start for r in read_validation(metrics_path))
        if validator.due(start, total) and not checked:
            if start > 0:
                print(f"Making outer step {start}'s check, which was cut short.", file=sys.stderr)
            elif progress and writer:
                print(
                    "Validating the initial learned optimizer (training it alone; the first "
                    "check compiles).",
                    file=sys.stderr,
                )
            validator(state, start)
    if start >= total:
        print(
            f"{out}: the run is complete ({start} of {total} outer steps). To train on from its "
            f"learned optimizer, start a new run with --init-from {out} (init_from)."
        )
        if progress and writer:
            print(_summary(out, config, record))
        return state
    state = _loop(state, run_key, start, total, out, every, progress, step_timeout, validator)
    if progress and writer:
        print(_summary(out, config, record))
    return state


def _summary(out: Path, config: MetaConfig, record: Mapping[str, Any]) -> str:
    """The end-of-run summary, from the run's metrics file (all of the run's sessions)."""
    steps = read_metrics(out / METRICS_FILE)
    alpha = steps[-1].get("alpha") if steps else None
    return run_summary(out, config, alpha, read_validation(out / METRICS_FILE), record)


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


def _out_of_the_rate(bar: Any, seconds: float) -> None:
    """Leave `seconds` (a validation check) out of the bar's rate, as the compiling step is:
    counted as the time of one outer step, a check would put the time left at hours for a while.
    The elapsed time still counts it."""
    if not bar.disable:
        bar.last_print_t += seconds


def _loop(
    state: MetaState,
    run_key: Any,
    start: int,
    total: int,
    out: Path,
    every: int,
    show_progress: bool,
    step_timeout: float | None,
    validator: Validator | None,
) -> MetaState:
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
            disable=not show_progress or not writer,
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
    # collective, so the handler is installed only for single-process runs; a caller's own
    # SIGTERM handler is left in place (it stops the run by raising KeyboardInterrupt).
    previous = signal.getsignal(signal.SIGTERM)
    in_main_thread = jax.process_count() == 1
    if in_main_thread and previous is signal.SIG_DFL:
        try:
            signal.signal(signal.SIGTERM, signal.default_int_handler)
        except ValueError:
            in_main_thread = False
    elif in_main_thread:
        in_main_thread = threading.current_thread() is threading.main_thread()
    watchdog = StepWatchdog(step_timeout) if step_timeout is not None else contextlib.nullcontext()
    step = start
    saved_at = start
    shown_phase = None
    config = state.config
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
                # The bar shows the step it counts, and a new phase or validation score at once,
                # not at the next refresh.
                phase = supervision_phase(config, metrics["alpha"])
                scores = None if validator is None else validator.scores
                postfix = progress_postfix(config, metrics, scores)
                if t == start:
                    bar.close()
                    bar = progress(step, "meta-train", leave=True)
                    bar.set_postfix_str(postfix)
                else:
                    bar.set_postfix_str(postfix, refresh=False)
                    if not bar.update(1) and phase != shown_phase:
                        bar.refresh()
                shown_phase = phase
                if validator is not None and validator.due(step, total):
                    bar.set_description("meta-train (validating)")
                    checking = time.time()
                    validator(state, step, metrics_file)
                    _out_of_the_rate(bar, time.time() - checking)
                    bar.set_description("meta-train", refresh=False)
                    bar.set_postfix_str(progress_postfix(config, metrics, validator.scores))
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
                f"Interrupted at outer step {step}; {done}. Rerun the same command (or "
                f"elo.meta_train with the same arguments) to {again}.",
                file=sys.stderr,
            )
            raise
        finally:
            bar.close()
            if metrics_file is not None:
                metrics_file.close()
            if in_main_thread and previous is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, previous)
    print(f"{out}: {total} outer steps done; checkpoint {checkpoint}.")
    return state
