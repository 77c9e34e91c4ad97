"""Seconds per outer step of the ORIGINAL reference (google/learned_optimization) PES-small_fc.

Times learned_optimization's own truncated-PES meta-training of small_fc in the configuration
that `benchmarks/meta_step.py --configs reference` times for elo, so that the two speeds are
measured on one machine:

- learned optimizer: `learned_optimizers.adafac_mlp_lopt.AdafacMLPLOpt(hidden_size=32,
  hidden_layers=2)` (small_fc; its other arguments at their defaults);
- task: `tasks.fixed.image_mlp._MLPImageTask(datasets, [32])` (flatten -> Linear(32) -> ReLU ->
  Linear(10), mean softmax cross-entropy; 64*32+32+32*10+10 = 2410 parameters) on MNIST 8x8
  (x/255, input 64), batch 64, made a task family by `tasks.base.single_task_to_family`, wrapped
  in `tasks.task_augmentation.ReparamWeightsFamily(level="global", (1e-3, 1e3))` as elo's
  `pes_small_fc` preset does (`--no-task-augmentation` leaves it out);
- truncated step: `outer_trainers.lopt_truncated_step.VectorizedLOptTruncatedStep` with
  `num_tasks=8` particles, `truncation_schedule.LogUniformLengthSchedule(100, 2000)` and
  `random_initial_iteration_offset=1000` (elo's `min_horizon`, `max_horizon`,
  `initial_step_offset`);
- estimator: `outer_trainers.truncated_pes.TruncatedPES(trunc_length=50, std=0.01,
  steps_per_jit=10, stack_antithetic_samples=False)`: antithetic, so 16 trajectories of 50 inner
  steps per outer step (800 inner steps), pos and neg unrolled one after the other as in the
  reference (5 jitted `lax.scan`s of 10 steps per sign);
- meta-optimizer: `outer_trainers.gradient_learner.SingleMachineGradientLearner` with
  `optimizers.optax_opts.OptaxOptimizer(clip_by_global_norm(1.0) + adamw(warmup-cosine 0 -> 1e-4
  over 100 steps -> 1e-5 at 100000, weight decay 1e-4))`, elo's `pes_small_fc` meta-optimizer
  (`--meta-opt adam` uses `optax_opts.Adam(1e-3)` instead; the cost is the same).

One outer step is one `SingleMachineGradientLearner.update(state, key)` (the PES estimate over
all 8 particles followed by the meta-update), then `jax.block_until_ready`. After the compiling
first step, `--warmup` steps run untimed, then `--steps` steps are timed one by one.

Data never comes from tfds or the internet: `/work/shared/data/mnist_8x8/train.parquet` (uint8,
HWC) is read into memory and the first 80% of its rows are used (the reference's `train[0:80%]`
split for MNIST). `--data numpy` (default) is learned_optimization's own data path: the task's
`Datasets.train` is a Python iterator over the in-memory float32 array (x/255, shape
[64, 8, 8, 1]) that yields batches in epoch-permutation order, and `VectorizedLOptTruncatedStep`
pulls 10 x 8 of them per `lax.scan` on the host (400 batches per outer step); the JSON records
how long that host-side fetching takes on its own (`data_fetch_s_per_step`). `--data device`
instead keeps the uint8 array on the device and samples each minibatch inside the jitted inner
step from the step's PRNG key (`jax.random.randint`, with replacement; pos and neg see the same
batch since they share keys); this overrides `_MLPImageTask.loss` in a subclass and is a
deviation from the reference, kept only to bound the data-loading share.

Set-up (a venv OUTSIDE the repository; `benchmarks/reference/setup.sh` does all of this):

    # 1. the reference source (learned_optimization commit 32186aa46a96f26ba0625755f93c55659adcd523)
    #    extracted to /work/refbench/learned_optimization, with the commit written to
    #    /work/refbench/learned_optimization/LEARNED_OPTIMIZATION_COMMIT
    # 2. the venv (Python 3.11.7):
    python3.11 -m venv /work/refbench/.venv
    /work/refbench/.venv/bin/pip install --upgrade pip
    /work/refbench/.venv/bin/pip install jax==0.9.0 jaxlib==0.9.0 dm-haiku==0.0.17 flax==0.12.6 \
        optax==0.2.8 chex==0.1.92 gin-config==0.5.0 absl-py==2.5.1 numpy==2.4.6 pyarrow==26.0.1 \
        tensorflow-cpu==2.21.0 tensorflow-datasets==4.9.10
    /work/refbench/.venv/bin/pip install --no-deps -e /work/refbench/learned_optimization

(`benchmarks/reference/requirements-reference.txt` is the full `pip freeze` of that venv.)
TensorFlow and tensorflow-datasets are only imported, never used: learned_optimization imports
them at module level (`summary.py`, `filesystem.py`, `tasks/datasets/base.py`). oryx is not
installed: learned_optimization then logs "Oryx not found! ... no summary will be logged" and
works (summaries are off in the timed steps anyway).

Run (from the repository root, with the reference venv's Python, on a quiet machine):

    /work/refbench/.venv/bin/python benchmarks/reference/pes_small_fc.py [--steps 30]
        [--warmup 3] [--data numpy|device] [--out benchmarks/results/reference_pes_small_fc.json]

The JSON holds the per-step minimum, median, maximum and mean, the compile+first-step time,
every timed step, the configuration and parameter counts, the learned_optimization commit,
jax/jaxlib versions, the CPU model, `os.cpu_count()`, `jax.device_count()`, `XLA_FLAGS` and the
load average before and after. Nothing is asserted beyond the configuration checks.
"""

import os


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow is imported, never used.

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = Path("/work/shared/data/mnist_8x8/train.parquet")
DEFAULT_OUT = REPO / "benchmarks" / "results" / "reference_pes_small_fc.json"
COMMIT_FILE = "LEARNED_OPTIMIZATION_COMMIT"


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def lo_commit() -> str:
    """The learned_optimization commit: `$LEARNED_OPTIMIZATION_COMMIT`, the file that setup.sh
    writes beside the extracted source, or `git rev-parse` of a checkout."""
    if os.environ.get("LEARNED_OPTIMIZATION_COMMIT"):
        return os.environ["LEARNED_OPTIMIZATION_COMMIT"]
    import learned_optimization

    root = Path(learned_optimization.__file__).resolve().parents[1]
    if (root / COMMIT_FILE).exists():
        return (root / COMMIT_FILE).read_text().strip()
    try:
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_mnist_8x8(path: Path, train_fraction: float):
    """uint8 images [n, 8, 8, 1] (HWC) and int32 labels [n] of the first `train_fraction` rows."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    flat = table.column("image").combine_chunks().flatten().to_numpy()
    images = np.asarray(flat, dtype=np.uint8).reshape(table.num_rows, 8, 8, 1)
    labels = table.column("label").to_numpy().astype(np.int32)
    n = int(table.num_rows * train_fraction)
    return images[:n], labels[:n]


def epoch_batches(images, labels, batch_size: int, seed: int):
    """Endless minibatches `{"image": float32 [b, 8, 8, 1], "label": int32 [b]}` in
    epoch-permutation order from in-memory arrays (the shape and dtype of learned_optimization's
    image datasets)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = len(labels)
    while True:
        perm = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = perm[start : start + batch_size]
            yield {"image": images[idx], "label": labels[idx]}


def build(args):
    """The reference objects: `(learner, task, lopt, truncated_step, estimator)`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from learned_optimization.learned_optimizers import adafac_mlp_lopt
    from learned_optimization.optimizers import optax_opts
    from learned_optimization.outer_trainers import (
        gradient_learner,
        lopt_truncated_step,
        truncated_pes,
        truncation_schedule,
    )
    from learned_optimization.tasks import base as tasks_base, task_augmentation
    from learned_optimization.tasks.datasets import base as datasets_base
    from learned_optimization.tasks.fixed import image_mlp

    images_u8, labels = load_mnist_8x8(Path(args.data_path), args.train_fraction)
    args.train_rows = len(labels)
    abstract_batch = {
        "image": jax.ShapeDtypeStruct((args.batch_size, 8, 8, 1), jnp.float32),
        "label": jax.ShapeDtypeStruct((args.batch_size,), jnp.int32),
    }
    extra_info = {"num_classes": 10}

    if args.data == "numpy":
        images = images_u8.astype(np.float32) / 255.0  # the reference's x/255, float32

        def split(seed):
            return epoch_batches(images, labels, args.batch_size, seed)

        datasets = datasets_base.Datasets(
            train=split(1),
            inner_valid=split(2),
            outer_valid=split(3),
            test=split(4),
            extra_info=extra_info,
            abstract_batch=abstract_batch,
        )
        task = image_mlp._MLPImageTask(datasets, [32])
    else:

        def empty():
            while True:
                yield {}

        datasets = datasets_base.Datasets(
            train=empty(),
            inner_valid=empty(),
            outer_valid=empty(),
            test=empty(),
            extra_info=extra_info,
            abstract_batch=abstract_batch,
        )
        device_images = jnp.asarray(images_u8)
        device_labels = jnp.asarray(labels)
        batch_size = args.batch_size

        class DeviceDataMLPImageTask(image_mlp._MLPImageTask):
            """`_MLPImageTask` whose minibatch is drawn inside jit from the step's key."""

            def loss(self, params, key, data):
                del data  # the empty batch of the `Datasets` above
                idx = jax.random.randint(
                    jax.random.fold_in(key, 7), (batch_size,), 0, device_labels.shape[0]
                )
                batch = {
                    "image": device_images[idx].astype(jnp.float32) / 255.0,
                    "label": device_labels[idx],
                }
                return super().loss(params, key, batch)

        task = DeviceDataMLPImageTask(datasets, [32])

    family = tasks_base.single_task_to_family(task)
    if args.task_augmentation:
        family = task_augmentation.ReparamWeightsFamily(family, "global", (1e-3, 1e3))

    lopt = adafac_mlp_lopt.AdafacMLPLOpt(hidden_size=32, hidden_layers=2)
    trunc_sched = truncation_schedule.LogUniformLengthSchedule(args.min_horizon, args.max_horizon)
    truncated_step = lopt_truncated_step.VectorizedLOptTruncatedStep(
        family,
        lopt,
        trunc_sched,
        num_tasks=args.num_particles,
        random_initial_iteration_offset=args.initial_step_offset,
    )
    estimator = truncated_pes.TruncatedPES(
        truncated_step,
        trunc_length=args.trunc_length,
        std=args.std,
        steps_per_jit=args.steps_per_jit,
        stack_antithetic_samples=args.stack_antithetic,
    )
    if args.meta_opt == "adamw":
        schedule = optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=1e-4,
            warmup_steps=100,
            decay_steps=100_000,
            end_value=1e-5,
        )
        theta_opt = optax_opts.OptaxOptimizer(
            optax.chain(
                optax.clip_by_global_norm(1.0),
                optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4),
            )
        )
    else:
        theta_opt = optax_opts.Adam(1e-3)
    learner = gradient_learner.SingleMachineGradientLearner(lopt, [estimator], theta_opt)
    return learner, task, lopt, truncated_step, estimator


def count_params(tree) -> int:
    import jax

    return int(sum(x.size for x in jax.tree_util.tree_leaves(tree)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed outer steps (30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps after compiling (3)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the JSON file")
    parser.add_argument(
        "--data",
        choices=("numpy", "device"),
        default="numpy",
        help="numpy: the reference's host iterator (default); device: in-jit",
    )
    parser.add_argument("--data-path", default=str(DEFAULT_DATA))
    parser.add_argument("--train-fraction", type=float, default=0.8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-particles", type=int, default=8)
    parser.add_argument("--trunc-length", type=int, default=50)
    parser.add_argument("--steps-per-jit", type=int, default=10)
    parser.add_argument("--std", type=float, default=0.01)
    parser.add_argument("--min-horizon", type=int, default=100)
    parser.add_argument("--max-horizon", type=int, default=2000)
    parser.add_argument("--initial-step-offset", type=int, default=1000)
    parser.add_argument(
        "--stack-antithetic",
        action="store_true",
        help="stack pos/neg into one unroll (the reference default is off)",
    )
    parser.add_argument("--no-task-augmentation", dest="task_augmentation", action="store_false")
    parser.add_argument("--meta-opt", choices=("adamw", "adam"), default="adamw")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    load_before = os.getloadavg()
    # LogUniformLengthSchedule asks for int64 while x64 is off (the reference runs that way too).
    warnings.filterwarnings("ignore", message="Explicitly requested dtype")

    import jax
    import jaxlib
    import learned_optimization  # noqa: F401

    learner, task, lopt, truncated_step, estimator = build(args)
    task_params = count_params(task.init(jax.random.PRNGKey(0)))
    lo_params = count_params(lopt.init(jax.random.PRNGKey(0)))
    config = {
        "learned_optimizer": f"AdafacMLPLOpt(hidden_size=32, hidden_layers=2) [{lopt.name}]",
        "task": "_MLPImageTask([32]) MNIST 8x8 (x/255, 64 inputs, 10 classes)",
        "task_augmentation": "ReparamWeightsFamily(global, 1e-3..1e3)"
        if args.task_augmentation
        else "none",
        "data": args.data,
        "train_rows": args.train_rows,
        "batch_size": args.batch_size,
        "num_particles": args.num_particles,
        "trajectories": 2 * args.num_particles,
        "trunc_length": args.trunc_length,
        "steps_per_jit": args.steps_per_jit,
        "inner_steps_per_outer_step": 2 * args.num_particles * args.trunc_length,
        "std": args.std,
        "truncation_schedule": f"LogUniformLengthSchedule({args.min_horizon}, {args.max_horizon})",
        "random_initial_iteration_offset": args.initial_step_offset,
        "stack_antithetic_samples": args.stack_antithetic,
        "meta_optimizer": "clip 1.0 + adamw(warmup-cosine 1e-4 -> 1e-5, wd 1e-4)"
        if args.meta_opt == "adamw"
        else "Adam(1e-3)",
        "task_params": task_params,
        "lo_params": lo_params,
    }
    print(
        f"config: particles {config['num_particles']}, trajectories {config['trajectories']}, "
        f"trunc_length {config['trunc_length']} (steps_per_jit {args.steps_per_jit}), "
        f"batch {config['batch_size']}, task params {task_params}, LO params {lo_params}, "
        f"std {args.std}, {config['truncation_schedule']}, data {args.data}, "
        f"augmentation {config['task_augmentation']}, devices {jax.device_count()}",
        flush=True,
    )

    key = jax.random.PRNGKey(args.seed)
    state = learner.init(jax.random.fold_in(key, 0))
    jax.block_until_ready(state)

    def outer_step(state, step_key):
        state, loss, _ = learner.update(state, step_key, with_metrics=False)
        jax.block_until_ready(state)
        return state, loss

    start = time.perf_counter()
    state, loss = outer_step(state, jax.random.fold_in(key, 1))
    compile_and_first = time.perf_counter() - start
    for t in range(args.warmup):
        state, loss = outer_step(state, jax.random.fold_in(jax.random.fold_in(key, 2), t))
    times = []
    for t in range(args.steps):
        start = time.perf_counter()
        state, loss = outer_step(state, jax.random.fold_in(jax.random.fold_in(key, 3), t))
        times.append(time.perf_counter() - start)

    data_fetch = None
    if args.data == "numpy" and args.steps:
        # The host-side share: the batches one outer step pulls, fetched alone.
        reps = max(1, min(args.steps, 10))
        start = time.perf_counter()
        for _ in range(reps):
            estimator.get_datas()
        data_fetch = (time.perf_counter() - start) / reps

    report = {
        "config": config,
        "timings": {
            "compile_and_first_step_s": compile_and_first,
            "seconds_per_step_min": min(times) if times else None,
            "seconds_per_step_median": statistics.median(times) if times else None,
            "seconds_per_step_max": max(times) if times else None,
            "seconds_per_step_mean": statistics.fmean(times) if times else None,
            "steps_timed": args.steps,
            "warmup_steps": args.warmup,
            "step_seconds": times,
            "data_fetch_s_per_step": data_fetch,
            "final_meta_loss": float(loss),
        },
        "machine": {
            "platform": platform.platform(),
            "cpu_model": cpu_model(),
            "cpus": os.cpu_count(),
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "device_count": jax.device_count(),
            "devices": [str(d) for d in jax.devices()],
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "load_average_1_5_15_before": load_before,
            "load_average_1_5_15_after": os.getloadavg(),
        },
        "learned_optimization_commit": lo_commit(),
        "python": sys.version.split()[0],
        "command": "python benchmarks/reference/pes_small_fc.py " + " ".join(sys.argv[1:]),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    t = report["timings"]
    if times:
        fetch = f", data fetch {data_fetch:.4f} s" if data_fetch is not None else ""
        print(
            f"reference PES small_fc: s/step min {t['seconds_per_step_min']:.4f} median "
            f"{t['seconds_per_step_median']:.4f} max {t['seconds_per_step_max']:.4f} "
            f"({args.steps} steps){fetch}, compile+first {compile_and_first:.1f} s, "
            f"jax {jax.__version__}, load {os.getloadavg()[0]:.2f}"
        )
    else:
        print(f"compile+first {compile_and_first:.1f} s (no timed steps)")


if __name__ == "__main__":
    main()
