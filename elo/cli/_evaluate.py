"""`elo evaluate`: train a held-out task with a learned or hand-designed optimizer."""

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from .._evaluation._baselines import BASELINES
from .._evaluation._evaluate import (
    evaluate,
    Evaluation,
    EVALUATION_FORMAT,
    log_grid,
    selection_score,
)
from .._evaluation._tuning import compare, Comparison, COMPARISON_FORMAT, tune, Tuned
from .._files._framing import atomic_write
from .._files._optimizer_file import load_optimizer
from .._files._pretrained import available_pretrained, PRETRAINED_SCHEME
from .._run._environment import environment
from ..tasks import list_tasks
from ._common import check_writable, CLIError, load_pretrained as _pretrained
from ._task_factory import is_factory, load_factory_tasks, TASK_HELP


DESCRIPTION = """\
Train a task from scratch with an optimizer and report its learning curves.

{targets}

{tasks}

Every seed (and every learning rate of a sweep) trains in one compiled program. Seed s draws the
initial parameters and the minibatches from jax.random.key(s), so all optimizers see the same
data. Train/test loss and accuracy over the whole splits are measured every --eval-every steps.
A sweep selects the learning rate with the lowest final loss on the TRAIN split (mean over seeds;
--select validation_loss or test_loss picks by another split). Prints a table and writes a JSON
file.

--baselines adamw,muon,sgd compares TARGET with tuned baselines instead: AdamW, Muon and SGD
with momentum 0.9 (or Adam), each with linear warmup and cosine decay, their peak learning rate
swept over --sweep values on a log grid (TARGET's learning-rate multiplier if it is a learned
optimizer).
Every choice is made on the task's VALIDATION split. A choice at an end of its grid has the grid
extended past that end at the grid's own log spacing (--extend-edges values per end at most, 3);
one still at an end is marked "edge". The table reports the chosen setting's final and best test
loss, how many values diverged, the values added past the grid's ends, and the steps it needs to
reach tuned AdamW's final test loss (AdamW is always tuned).

examples:
  elo evaluate runs/elo --task mlp-w128-d3_fashionmnist-8x8x1 --steps 1000 --seeds 3
  elo evaluate pretrained:small_fc_mnist8 --task conv-c16-d2_cifar10-8x8x3 --steps 1000
  elo evaluate adamw --task conv-c16-d2_cifar10-8x8x3 --steps 1000 --lr-sweep
  elo evaluate adamw --task mlp-w128-d3_fashionmnist-8x8x1 --steps 5000 --lr-sweep \\
      --lr-min 1e-4 --lr-max 1e-1 --lr-num 7 --out evals/adamw.json
  elo evaluate runs/elo --task mlp-w128-d3_fashionmnist-8x8x1 --steps 2000 \\
      --baselines adamw,muon,sgd --sweep 7 --seeds 3
  elo evaluate runs/mine --task mytasks:make_task --steps 1000 --seeds 3
"""


def _targets_help() -> str:
    return textwrap.fill(
        "TARGET is a run directory of 'elo meta-train' (its latest checkpoint), a checkpoint "
        "file, an optimizer exported with 'elo export --format eqx', a learned optimizer shipped "
        f"with elo (pretrained:NAME, NAME one of: {', '.join(available_pretrained())}), or a "
        "hand-designed optimizer: adamw, adam, sgd (momentum 0.9) or muon, with a constant "
        "learning rate (--lr, or --lr-sweep to tune it). A learned optimizer runs alone (no "
        "expert) and is told the run length (--steps).",
        width=96,
        break_on_hyphens=False,
    )


def _tasks_help() -> str:
    return textwrap.fill(
        f"--task names a task: {', '.join(list_tasks())}, or any of the forms "
        "mlp-w{width}-d{depth}_{dataset}-{H}x{W}x{C}, "
        "conv-c{channels}-d{depth}_{dataset}-{H}x{W}x{C} and quadratic-d{dim} (datasets: mnist, "
        "fashionmnist, cifar10, svhn). In Python, elo.tasks.list_tasks() lists the names and "
        "help(elo.tasks.get_task) explains the forms.",
        width=96,
        break_on_hyphens=False,
    )


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="evaluate an optimizer on a task (learning curves, LR sweeps)",
        description=DESCRIPTION.format(targets=_targets_help(), tasks=_tasks_help()),
    )
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="run directory, checkpoint, exported optimizer, pretrained:NAME, or "
        "adamw/adam/sgd/muon",
    )
    parser.add_argument(
        "--task",
        required=True,
        metavar="TASK",
        help=f"the task to train: {TASK_HELP} (names: see above; each task of a list is "
        "evaluated in turn)",
    )
    parser.add_argument("--steps", required=True, type=int, metavar="N", help="training steps")
    parser.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds 0..K-1 (1)")
    parser.add_argument(
        "--eval-every", type=int, metavar="E", help="steps between evaluations (steps // 20)"
    )
    parser.add_argument("--lr", type=float, help="learning rate of a hand-designed optimizer")
    parser.add_argument(
        "--lr-sweep", action="store_true", help="tune the learning rate on a log grid"
    )
    parser.add_argument("--lr-min", type=float, default=1e-4, help="sweep grid start (1e-4)")
    parser.add_argument("--lr-max", type=float, default=1e-1, help="sweep grid end (1e-1)")
    parser.add_argument("--lr-num", type=int, default=7, help="sweep grid size (7)")
    parser.add_argument(
        "--select",
        choices=("train_loss", "validation_loss", "test_loss"),
        default="train_loss",
        help="what the sweep minimises at the last step (train_loss)",
    )
    parser.add_argument(
        "--baselines",
        metavar="LIST",
        help=f"compare with tuned baselines, comma-separated from {','.join(BASELINES)}",
    )
    parser.add_argument(
        "--sweep", type=int, metavar="N", help="values per optimizer with --baselines (7)"
    )
    parser.add_argument(
        "--extend-edges",
        type=int,
        metavar="N",
        help="with --baselines, the most values added past each end of a grid whose choice "
        "lies there (3)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="minibatch size (64)")
    parser.add_argument("--data-dir", metavar="DIR", help="directory searched first for data")
    parser.add_argument(
        "--out", metavar="FILE", help="the JSON file to write (default: see the docs)"
    )
    parser.set_defaults(func=run)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "target"


def _resolve_target(target: str) -> tuple[Any, str, Path | None]:
    """(optimizer or hand-designed name, label, run directory or None)."""
    path = Path(target)
    if target in BASELINES and not path.exists():
        return target, target, None
    if target.startswith(PRETRAINED_SCHEME):
        return _pretrained(target), target, None
    if not path.exists():
        raise CLIError(
            f"TARGET {target!r} is neither an existing run directory, checkpoint or optimizer "
            f"file, nor one of {', '.join(BASELINES)}, nor pretrained:NAME."
        )
    lo = load_optimizer(path)
    return lo, str(target), path if path.is_dir() else None


def _default_out(label: str, run_dir: Path | None, task: str, steps: int) -> Path:
    if run_dir is not None:
        return run_dir / "evaluations" / f"{_slug(task)}-{steps}.json"
    return Path("evaluations") / f"{_slug(Path(label).name)}_{_slug(task)}-{steps}.json"


def _fmt(pair: tuple[float, float], digits: int = 4, *, missing: str = "diverged") -> str:
    """`mean ± std`; a NaN mean is `missing` (a diverged loss, or an accuracy the task lacks)."""
    mean, std = pair
    if mean != mean:  # NaN
        return missing
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


WORSE = " †"
WORSE_LEGEND = (
    "† worse than not training: for some seed the final test loss is finite and above the "
    "initial one"
)


def _test_loss(result: Evaluation, pair: tuple[float, float]) -> str:
    """A test loss, marked when the run ended worse than not training."""
    return _fmt(pair) + (WORSE if result.worse_than_untrained() else "")


def _row(result: Evaluation, mark: str = "") -> list[str]:
    lr = "-" if result.learning_rate is None else f"{result.learning_rate:.3g}"
    return [
        mark + result.name,
        lr,
        _fmt(result.final("train_loss")),
        _test_loss(result, result.final("test_loss")),
        _fmt(result.final("test_accuracy"), missing="–"),
        _fmt(result.best("test_accuracy"), missing="–"),
    ]


HEADER = ["optimizer", "lr", "train loss", "test loss", "test acc", "best test acc"]


def evaluation_document(
    target: str,
    result: Evaluation,
    sweep: list[Evaluation] | None = None,
    select: str | None = None,
) -> dict[str, Any]:
    """The JSON document `elo evaluate` writes: the (selected) evaluation's curves and summary,
    plus one summary per learning rate of a sweep."""
    document = {"format": EVALUATION_FORMAT, "version": 1, "target": target, **result.to_dict()}
    document["environment"] = environment()
    document["sweep"] = None
    document["select"] = select
    if sweep is not None:
        assert select in ("train_loss", "validation_loss", "test_loss")
        document["sweep"] = [
            {
                "learning_rate": r.learning_rate,
                "score": _finite(selection_score(r, select)),  # pyright: ignore
                "worse_than_untrained": r.worse_than_untrained(),
                "final": r.to_dict()["final"],
                "best": r.to_dict()["best"],
            }
            for r in sweep
        ]
    return document


def _finite(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def check_options(args: argparse.Namespace) -> None:
    """Refuse option values and combinations that are wrong whatever the target and task (a
    `CLIError` naming the option and the fix); nothing is loaded or run."""
    if args.steps < 1:
        raise CLIError(f"--steps must be a positive integer, got {args.steps}.")
    if args.seeds < 1:
        raise CLIError(f"--seeds must be a positive integer, got {args.seeds}.")
    if args.baselines is None and args.sweep is not None:
        raise CLIError("--sweep applies with --baselines; use --lr-sweep to tune TARGET alone.")
    if args.baselines is None and args.extend_edges is not None:
        raise CLIError("--extend-edges applies with --baselines.")


def run(args: argparse.Namespace) -> int:
    if isinstance(args.task, str) and is_factory(args.task):
        tasks = load_factory_tasks(args.task)
        if len(tasks) > 1 and args.out:
            raise CLIError(
                f"--out names one file, but --task {args.task} gives {len(tasks)} tasks; leave "
                "--out out to write one file per task."
            )
        names = [task.name for task in tasks]
        if len(set(names)) != len(names):
            raise CLIError(
                f"--task {args.task} gives tasks with the same name ({', '.join(names)}), whose "
                "results would overwrite each other; give each task its own name= ."
            )
        for task in tasks:
            run(argparse.Namespace(**{**vars(args), "task": task}))
        return 0
    check_options(args)
    optimizer, label, run_dir = _resolve_target(args.target)
    if args.baselines is not None:
        return _run_comparison(args, optimizer, label, run_dir)
    hand = isinstance(optimizer, str)
    if not hand and (args.lr_sweep or args.lr is not None):
        raise CLIError(
            "--lr and --lr-sweep apply to hand-designed optimizers only; a learned optimizer's "
            "learning-rate multiplier has no fixed-value option: --baselines adamw --sweep N "
            "tunes it, and in Python elo.evaluate(elo.as_optax(lo, num_steps=N, "
            "learning_rate=M), task, num_steps=N) sets it."
        )
    if args.lr_sweep and args.lr is not None:
        raise CLIError("give either --lr or --lr-sweep, not both.")
    # Checked before training: a result that could not be written would be lost.
    task_label = args.task if isinstance(args.task, str) else args.task.name
    out = Path(args.out) if args.out else _default_out(label, run_dir, task_label, args.steps)
    check_writable(out, "--out")
    common = dict(
        num_steps=args.steps,
        seeds=args.seeds,
        eval_every=args.eval_every,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
    )
    sweep = None
    if args.lr_sweep:
        try:
            grid = log_grid(args.lr_min, args.lr_max, args.lr_num)
        except ValueError:
            raise CLIError(
                "--lr-min, --lr-max, --lr-num must satisfy 0 < lr-min <= lr-max and lr-num >= 1."
            ) from None
        tuned = tune(
            optimizer,
            args.task,
            values=grid,
            schedule="constant",
            select=args.select,
            **common,
        )
        result, sweep = tuned.best, list(tuned.sweep)
    else:
        result = evaluate(optimizer, args.task, learning_rate=args.lr, name=label, **common)
    result = _relabel(result, label)
    print(f"task {result.task}, {result.num_steps} steps, seeds {list(result.seeds)} (mean ± std)")
    if sweep is not None:
        rows = [
            _row(_relabel(r, label), "* " if r.learning_rate == result.learning_rate else "  ")
            for r in sweep
        ]
        print(_table(rows, HEADER))
        print(f"* selected: lowest final {args.select.replace('_', ' ')}")
    else:
        print(_table([_row(result)], HEADER))
    if any(r.worse_than_untrained() for r in (sweep or [result])):
        print(WORSE_LEGEND)
    document = evaluation_document(label, result, sweep, args.select if sweep else None)
    data = json.dumps(document, allow_nan=False).encode() + b"\n"
    try:
        atomic_write(out, [data])
    except OSError as e:
        raise CLIError(f"could not write {out} ({e.strerror or e}); {_keep(data)}.") from None
    print(f"wrote {out}")
    return 0


def _keep(data: bytes) -> str:
    """Save a result that could not be written where asked (the training it cost is not lost)."""
    try:
        fd, name = tempfile.mkstemp(prefix="elo-evaluation-", suffix=".json")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError:
        sys.stdout.write(data.decode())
        return "the result is printed above"
    return f"the result is kept in {name}"


def _relabel(result: Evaluation, label: str) -> Evaluation:
    return dataclasses.replace(result, name=label)


def _baselines(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if not names or unknown:
        raise CLIError(f"--baselines must list names among {','.join(BASELINES)}, got {text!r}.")
    return list(dict.fromkeys(names))


def _added(tuned: Tuned) -> str:
    """The values added past the grid's ends: e.g. `2 high`, `1 low, 1 high`, or `-`."""
    low = next((i for i, e in enumerate(tuned.extended) if not e), 0)
    high = sum(tuned.extended) - low
    parts = [f"{n} {end}" for n, end in ((low, "low"), (high, "high")) if n]
    return ", ".join(parts) or "-"


def _comparison_rows(result: Comparison) -> list[list[str]]:
    rows = []
    for tuned, steps in zip(result.tuned, result.steps_to_target):
        value = tuned.value
        setting = f"lr {value:.3g}" if tuned.hyperparameter == "learning_rate" else f"x{value:.3g}"
        if tuned.at_edge is not None:
            setting += f" ({tuned.at_edge} edge)"
        diverged = sum(tuned.diverged)
        rows.append(
            [
                tuned.name,
                setting,
                _fmt(tuned.best.final("validation_loss")),
                _test_loss(tuned.best, tuned.best.final("test_loss")),
                _fmt(tuned.best.best("test_loss")),
                _fmt(tuned.best.final("test_accuracy"), missing="–"),
                f"{diverged}/{len(tuned.values)}",
                _added(tuned),
                "never" if steps is None else str(steps),
            ]
        )
    return rows


COMPARISON_HEADER = [
    "optimizer",
    "chosen",
    "val loss",
    "test loss",
    "best test loss",
    "test acc",
    "diverged",
    "added",
    "steps to AdamW",
]


def comparison_document(target: str, result: Comparison) -> dict[str, Any]:
    """The JSON document `elo evaluate --baselines` writes: [`elo.Comparison.to_dict`][]."""
    document = {"format": COMPARISON_FORMAT, "version": 1, "target": target, **result.to_dict()}
    return document | {"environment": environment()}


def _run_comparison(args: argparse.Namespace, optimizer: Any, label: str, run_dir: Any) -> int:
    if args.lr is not None or args.lr_sweep:
        raise CLIError("--baselines tunes every optimizer itself; drop --lr and --lr-sweep.")
    if args.sweep is not None and args.sweep < 1:
        raise CLIError(f"--sweep must be a positive integer, got {args.sweep}.")
    extend_edges = 3 if args.extend_edges is None else args.extend_edges
    if extend_edges < 0:
        raise CLIError(f"--extend-edges must be a non-negative integer, got {extend_edges}.")
    if extend_edges > 0 and args.sweep == 1:
        raise CLIError(
            "--sweep 1 leaves no grid spacing to extend past its ends: pass --sweep 2 or more, "
            "or --extend-edges 0."
        )
    baselines = _baselines(args.baselines)
    optimizers = [optimizer, *(b for b in baselines if b != optimizer)]
    names = [label, *(b for b in baselines if b != optimizer)]
    # Checked before training: a result that could not be written would be lost.
    if args.out:
        out = Path(args.out)
    else:
        task_label = args.task if isinstance(args.task, str) else args.task.name
        out = _default_out(label, run_dir, f"{task_label}-tuned", args.steps)
    check_writable(out, "--out")
    result = compare(
        optimizers,
        args.task,
        num_steps=args.steps,
        num_values=7 if args.sweep is None else args.sweep,
        extend_edges=extend_edges,
        seeds=args.seeds,
        eval_every=args.eval_every,
        names=names,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
    )
    first = result.tuned[0].best
    print(f"task {result.task}, {first.num_steps} steps, seeds {list(first.seeds)} (mean ± std)")
    print(_table(_comparison_rows(result), COMPARISON_HEADER))
    print(
        "chosen on the validation split; steps to AdamW: first evaluation point with a test "
        f"loss <= {result.target_loss:.4f} (tuned AdamW's final)"
    )
    print(
        "added: values swept past an end of the grid because the choice lay there (at most "
        f"{extend_edges} per end)"
    )
    if any(t.best.worse_than_untrained() for t in result.tuned):
        print(WORSE_LEGEND)
    if any(t.at_edge is not None for t in result.tuned):
        print(
            "(low edge), (high edge): the choice is still the lowest or highest value swept; a "
            "better one may lie beyond it"
        )
    data = json.dumps(comparison_document(label, result), allow_nan=False).encode() + b"\n"
    try:
        atomic_write(out, [data])
    except OSError as e:
        raise CLIError(f"could not write {out} ({e.strerror or e}); {_keep(data)}.") from None
    print(f"wrote {out}")
    return 0
