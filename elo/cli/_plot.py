"""`elo plot`: meta-training curves and evaluation curves as PNG files."""

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .._evaluation._evaluate import Evaluation, EVALUATION_FORMAT
from .._evaluation._tuning import COMPARISON_FORMAT
from .._files._run_dir import METRICS_FILE, read_metrics, read_validation, scan_records
from ._common import CLIError


DESCRIPTION = """\
Plot meta-training runs and evaluations.

Each PATH is a run directory of 'elo meta-train' (its metrics.jsonl) or a JSON file of 'elo
evaluate' (an evaluation, a sweep's chosen run, or the chosen run of every optimizer of
--baselines). Runs are drawn together on one figure (meta-loss, largest inner step reached,
alpha = the learned optimizer's weight in the fused trajectory); evaluations on another (training
minibatch loss, test loss, test accuracy; mean over seeds with a ± std band), one row of panels
per task with every optimizer of that task on the same axes.

examples:
  elo plot runs/elo
  elo plot runs/elo runs/pes --out meta.png
  elo plot runs/elo/evaluations/*.json evaluations/adamw_*.json --out eval.png
  elo plot runs/elo/evaluations/mlp-w128-d3_fashionmnist-8x8x1-tuned-2000.json
"""


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="plot meta-training and evaluation curves to PNG",
        description=DESCRIPTION,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run directories, JSON files")
    parser.add_argument(
        "--out",
        metavar="PNG",
        help="output file; with both runs and evaluations, '-meta' and '-eval' are added to its "
        "name (default: meta_training.png in the first run directory, evaluation.png next to "
        "the first evaluation file)",
    )
    parser.add_argument(
        "--smooth",
        type=int,
        default=0,
        metavar="W",
        help="moving-average window for per-step curves (0: automatic, 1: none)",
    )
    parser.set_defaults(func=run)


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(values) < window:
        return values
    kernel = np.ones(window) / window
    valid = np.convolve(values, kernel, mode="valid")
    return np.concatenate([np.full(window - 1, np.nan), valid])


def _window(n: int, requested: int) -> int:
    return requested if requested > 0 else max(1, n // 50)


def _load_evaluations(path: Path) -> list[Evaluation]:
    """One evaluation, or the chosen run of every optimizer of a comparison (`--baselines`)."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") == EVALUATION_FORMAT:
            return [Evaluation.from_dict(data)]
        if data.get("format") == COMPARISON_FORMAT:
            return [_chosen(o) for o in data["optimizers"]]
        raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        raise CLIError(f"{path} is not a readable evaluation file of 'elo evaluate'.") from None


def _chosen(optimizer: dict[str, Any]) -> Evaluation:
    result = Evaluation.from_dict(optimizer["evaluation"])
    if optimizer["hyperparameter"] == "learning_rate_multiplier":
        name = f"{result.name} (×{optimizer['selected_value']:.3g})"
        result = dataclasses.replace(result, name=name)
    return result


def _classify(paths: list[str]) -> tuple[list[Path], list[Path]]:
    runs, evals = [], []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            if not (path / METRICS_FILE).is_file():
                raise CLIError(f"{path} has no {METRICS_FILE}; is it a run directory?")
            runs.append(path)
        elif path.is_file():
            evals.append(path)
        else:
            raise CLIError(f"{path} does not exist.")
    return runs, evals


def plot_meta_training(runs: list[Path], out: Path, smooth: int = 0) -> Path:
    """Draw the meta-loss, the largest inner step, $\\alpha$ and (when the runs were validated)
    the learned optimizer's validation score of runs, to a PNG file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("meta_loss", "meta-loss of the trained (fused) trajectories"),
        ("max_inner_step", "largest inner step reached"),
        ("alpha", "α (learned optimizer's share)"),
    ]
    validated = any(read_validation(run / METRICS_FILE) for run in runs)
    fig, axes = plt.subplots(
        1, len(panels) + validated, figsize=(5 * (len(panels) + validated), 3.6)
    )
    for run in runs:
        if validated:
            checks = read_validation(run / METRICS_FILE)
            axes[-1].plot(
                [r["step"] for r in checks],
                [r["validation"]["score"] for r in checks],
                marker="o",
                markersize=3,
                label=run.name,
            )
            axes[-1].set_title("learned optimizer alone: validation score")
            axes[-1].set_xlabel("outer step")
        records = read_metrics(run / METRICS_FILE)
        if not records:
            raise CLIError(f"{run / METRICS_FILE} has no records yet.")
        steps = np.asarray([r["step"] for r in records])
        for ax, (key, title) in zip(axes, panels):
            values = np.asarray(
                [np.nan if r.get(key) is None else r[key] for r in records], np.float64
            )
            if key == "meta_loss":
                ax.plot(steps, values, alpha=0.25, linewidth=0.8)
                color = ax.lines[-1].get_color()
                ax.plot(
                    steps,
                    _smooth(values, _window(len(values), smooth)),
                    color=color,
                    label=run.name,
                )
            else:
                ax.plot(steps, values, label=run.name)
            ax.set_title(title)
            ax.set_xlabel("outer step")
    axes[0].legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def plot_evaluations(results: list[Evaluation], out: Path, smooth: int = 0) -> Path:
    """Draw the learning curves of several evaluations to a PNG file: one row of panels per task,
    every optimizer of a task on its row's shared axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({r.task for r in results})
    fig, grid = plt.subplots(len(tasks), 3, figsize=(15, 3.8 * len(tasks)), squeeze=False)
    for task, axes in zip(tasks, grid):
        _plot_task([r for r in results if r.task == task], axes, smooth)
        if len(tasks) > 1:
            for ax in axes:
                ax.set_title(f"{task}: {ax.get_title()}", fontsize=9)
    fig.suptitle(tasks[0] if len(tasks) == 1 else f"{len(tasks)} tasks, one row each")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _plot_task(results: list[Evaluation], axes: Any, smooth: int) -> None:
    """One task's row: training loss, test loss and test accuracy of each evaluation."""
    for r in results:
        label = r.name if r.learning_rate is None else f"{r.name} (lr {r.learning_rate:.3g})"
        mean = np.nanmean(r.minibatch_loss, axis=0)
        x = np.arange(1, len(mean) + 1)
        axes[0].plot(x, _smooth(mean, _window(len(mean), smooth)), label=label)
        for ax, metric in ((axes[1], "test_loss"), (axes[2], "test_accuracy")):
            values = getattr(r, metric)
            m, s = np.mean(values, axis=0), np.std(values, axis=0)
            ax.plot(r.steps, m, marker="o", markersize=3, label=label)
            ax.fill_between(r.steps, m - s, m + s, alpha=0.2, color=ax.lines[-1].get_color())
    axes[0].set_title("training loss (minibatch, smoothed)")
    axes[1].set_title("test loss")
    axes[2].set_title("test accuracy")
    for ax in axes:
        ax.set_xlabel("step")
    # Diverging runs leave the top of the loss panels, so the others stay readable.
    initial = [float(np.nanmean(r.test_loss[:, 0])) for r in results]
    finite = [v for r in results for v in np.ravel(r.test_loss) if np.isfinite(v)]
    if finite and all(np.isfinite(initial)):
        top = 1.5 * max(initial)
        bottom = max(0.0, min(finite) * 0.9)
        if bottom < top:
            axes[0].set_ylim(bottom, top)
            axes[1].set_ylim(bottom, top)
    axes[2].legend(fontsize=8)


def _with_suffix(out: Path, suffix: str) -> Path:
    return out.with_name(f"{out.stem}-{suffix}{out.suffix or '.png'}")


def _warn_unreadable(run: Path) -> None:
    """Say which lines of a run's metrics file the plot leaves out (as `elo meta-train` does)."""
    _, unreadable, _ = scan_records(run / METRICS_FILE)
    if unreadable:
        shown = ", ".join(map(str, unreadable[:5])) + (", ..." if len(unreadable) > 5 else "")
        plural = "s" if len(unreadable) > 1 else ""
        print(
            f"elo: warning: {run / METRICS_FILE}: {len(unreadable)} unreadable line{plural} "
            f"({shown}) left out of the plot.",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    if args.smooth < 0:
        raise CLIError(
            f"--smooth must be 0 (automatic), 1 (none) or a larger window, got {args.smooth}."
        )
    given = None if not args.out else Path(args.out)
    if given is not None and not given.suffix:
        # matplotlib would add ".png" itself; the name printed must be the file written.
        given = given.with_name(given.name + ".png")
    runs, eval_paths = _classify(args.paths)
    for path in runs:
        _warn_unreadable(path)
    results = [r for p in eval_paths for r in _load_evaluations(p)]
    written = []
    if runs:
        if given is not None:
            out = _with_suffix(given, "meta") if results else given
        else:
            out = runs[0] / "meta_training.png"
        written.append(plot_meta_training(runs, out, args.smooth))
    if results:
        if given is not None:
            out = _with_suffix(given, "eval") if runs else given
        else:
            out = eval_paths[0].parent / "evaluation.png"
        written.append(plot_evaluations(results, out, args.smooth))
    for path in written:
        print(f"wrote {path}")
    return 0
