"""The headline study's figures, drawn from its committed results (no training).

    python -m studies.celo2_headline.figures [--results-dir DIR]

Reads DIR/summary.json (`report.py`) and the finished main runs' `meta.json` under DIR/main, and
writes into DIR/figures/ (the Results page shows copies, made by a reviewed `cp`:
studies/README.md):

- `ratios.png`: every held-out cell, each arm's test loss as a ratio to tuned AdamW's (selected
  checkpoints; the mean over meta-training seeds with its 95% t-interval, and each seed), beside
  tuned Muon's and SGD's ratios: H1 asks whether ELO-Celo2 is at or below 1 on 8 of 14 cells.
- `selection_checks.png`: each main run's selection score (meta-validation, lower is better)
  at every check, its selected checkpoint marked, with ELO's imitation phase and handover
  shaded (the supervision schedule's fractions of the budget).
- `default_step.png`: item 4, the test loss at `learning_rate=1` as a ratio to tuned AdamW's
  per cell, with the 1.25× bar: both schedules of each Celo2 run whose item-4 cells are all
  judged (so far the checkpoint the rule ships), each shipped optimizer as shipped, and each
  one's decayed step where `evaluate.py shipped --decayed` made it.

- `long_horizon.png`: item 1, the chosen setting's test-loss curve over 30K steps of each of
  the small_fc study's PES and ELO checkpoints and of tuned AdamW, per task: the late rise the
  rule measures is the curve's last point above its lowest.

`figures.json` beside them records the commit, jax version and device count of the drawing and
the report commit of the summary they were drawn from.
"""

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.celo2_headline import settings


HERE = Path(__file__).parent
ARM_COLORS = {
    "pes_celo2": "tab:blue",
    "elo_celo2": "tab:orange",
    "pes_small_fc": "tab:green",
    "elo_small_fc": "tab:red",
}
BASELINE_MARKERS = {"muon": ("Muon", "s", "tab:purple"), "sgd": ("SGD", "^", "tab:gray")}
# ELO's supervision schedule (settings.DEFAULT_SCHEDULE): imitation alone until the first
# fraction of the budget, the learned optimizer alone from the second.
IMITATION_END, HANDOVER_END, _ = settings.PILOT_SCHEDULES[settings.DEFAULT_SCHEDULE]


def short_cell(key: str) -> str:
    """A cell's name for an axis: `fashion-mlp@1K`, `lm@2K`, `gru@2K`."""
    task, horizon = key.split("@")
    names = {
        "mlp-w128-d3_fashionmnist-8x8x1": "fashion-mlp",
        "conv-c16-d2_cifar10-8x8x3": "cifar-conv",
        "mlp-w64-d2_cifar10-8x8x3": "cifar-mlp",
        "transformer-w32-d2-h2_shakespeare-ctx32": "lm",
        "regression-mlp-w64-d2_teacher16": "regression",
        "gru-h32_mnist-rows-8x8": "gru",
    }
    steps = int(horizon)
    return (
        f"{names.get(task, task)}@{steps // 1000}K"
        if steps >= 1000
        else f"{names.get(task, task)}@{steps}"
    )


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ratio(value: float | None, reference: float | None) -> float:
    """`value / reference`, nan unless both are finite (the summary stores nan as None)."""
    if value is None or reference is None or not reference:
        return math.nan
    if not (math.isfinite(value) and math.isfinite(reference)):
        return math.nan
    return value / reference


def baseline_ratios(summary: dict[str, Any], name: str) -> list[float]:
    """Tuned baseline `name`'s test loss over tuned AdamW's, per cell (nan where missing)."""
    ratios = []
    for row in summary["cells"].values():
        value = row[name]["value"] if row[name] else None
        ratios.append(_ratio(value, row["adamw"]["value"] if row["adamw"] else None))
    return ratios


def default_step_series(summary: dict[str, Any]) -> list[tuple[str, list[float]]]:
    """`default_step.png`'s bars: per cell, the test loss at `learning_rate=1` over tuned
    AdamW's (nan where missing or not finite) of each Celo2 run whose item-4 cells are all
    judged (both schedules: for the shipped checkpoint, all that exist so far), of each shipped
    optimizer as shipped, and of each shipped optimizer's decayed step (`shipped_decayed`)."""
    keys = list(summary["cells"])
    series: list[tuple[str, list[float]]] = []
    for run, entry in summary["decayed"]["runs"].items():
        if entry["judged"] < entry["of"]:
            continue
        for schedule in ("constant", "decayed"):
            values = []
            for key in keys:
                cell = entry["cells"][key]
                default = cell[schedule]["default_test"] if cell[schedule] else None
                values.append(_ratio(default, cell["adamw"]))
            series.append((f"{run} {schedule}", values))
    for name, ship in summary["shipped"].items():
        values = [ship["cells"][k]["ratio_default_adamw"] for k in keys]
        series.append((f"shipped {name}", [v if _finite(v) else math.nan for v in values]))
    for name, entry in summary.get("shipped_decayed", {}).items():
        values = []
        for key in keys:
            cell = entry["cells"][key]
            default = cell["decayed"]["default_test"] if cell["decayed"] else None
            values.append(_ratio(default, cell["adamw"]))
        series.append((f"shipped {name}, decayed step", values))
    return series


# The window of `ratios.png`: the ratios that separate the arms. A diverged checkpoint's ratio
# (up to 5 here) would squash every other into a line at 1, so larger ones are marked at the top
# edge with their value instead; intervals are cut at the window's edges.
RATIO_WINDOW = (0.8, 2.0)


def _mark_beyond(ax, x: float, value: float, color: str, label: bool, row: int = 0) -> None:
    """A ratio above `RATIO_WINDOW`: a triangle at the top edge, with the value if `label`
    (in text row `row` below the edge, so that neighbouring arms' values do not overlap)."""
    top = RATIO_WINDOW[1]
    ax.scatter([x], [top * 0.985], marker="^", s=30 if label else 10, color=color, zorder=3)
    if label:
        ax.annotate(
            f"{value:.2f}",
            (x, top * 0.985),
            xytext=(0, -12 - 9 * row),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color=color,
        )


def ratios_figure(summary: dict[str, Any], path: Path) -> Path:
    """`ratios.png` (see the module's docstring) from the report's summary."""
    plt = _pyplot()
    keys = list(summary["cells"])
    x = np.arange(len(keys))
    arms = [
        a for a in settings.ARMS if any(summary["cells"][k]["arms"][a]["best"]["n"] for k in keys)
    ]
    width = 0.8 / max(len(arms), 1)
    fig, ax = plt.subplots(figsize=(13.5, 4.8))
    for i, arm in enumerate(arms):
        offset = (i - (len(arms) - 1) / 2) * width
        for j, key in enumerate(keys):
            ratio = summary["cells"][key]["arms"][arm]["best"]["ratio_adamw"]
            if ratio is None or not _finite(ratio["mean"]):
                continue
            half = ratio["ci95"] if _finite(ratio["ci95"]) else 0.0
            if ratio["mean"] > RATIO_WINDOW[1]:
                _mark_beyond(ax, j + offset, ratio["mean"], ARM_COLORS[arm], True, i % 2)
            ax.errorbar(
                j + offset,
                ratio["mean"],
                yerr=half,
                fmt="o",
                color=ARM_COLORS[arm],
                capsize=3,
                label=settings.ARMS[arm].label,
            )
            seeds = [v for v in ratio["per_seed"].values() if _finite(v)]
            ax.scatter([j + offset] * len(seeds), seeds, s=8, color=ARM_COLORS[arm], alpha=0.5)
            for seed in seeds:
                if seed > RATIO_WINDOW[1] and ratio["mean"] <= RATIO_WINDOW[1]:
                    _mark_beyond(ax, j + offset, seed, ARM_COLORS[arm], label=False)
    for name, (label, marker, color) in BASELINE_MARKERS.items():
        values = baseline_ratios(summary, name)
        ax.scatter(x, values, marker=marker, color=color, s=30, label=f"tuned {label}")
    ax.axhline(1.0, color="black", lw=1)
    ax.set_ylim(*RATIO_WINDOW)
    ax.set_xticks(x, [short_cell(k) for k in keys], rotation=45, ha="right")
    ax.set_ylabel("test loss / tuned AdamW's")
    ax.set_title(
        "Held-out cells: selected checkpoints, mean ± 95% interval over meta-training seeds "
        f"(dots: seeds; ▲: above {RATIO_WINDOW[1]:g}, with the mean's value)"
    )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(
        unique.values(), unique.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1)
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def finished_runs(results: Path) -> dict[str, dict[str, Any]]:
    """The main runs' `meta.json` by `<arm>/s<seed>`, in settings.ARMS' order."""
    runs = {}
    for arm in settings.ARMS:
        for seed in settings.MAIN_SEEDS:
            path = results / "main" / arm / f"s{seed}" / "meta.json"
            if path.is_file():
                runs[f"{arm}/s{seed}"] = common.load_json(path)
    return runs


def selection_figure(runs: dict[str, dict[str, Any]], path: Path) -> Path:
    """`selection_checks.png`: one panel per architecture with finished runs."""
    plt = _pyplot()
    arms = {name.split("/")[0] for name in runs}
    panels = [p for p in ("celo2", "small_fc") if any(a.endswith(p) for a in arms)]
    fig, axes = plt.subplots(
        1, max(len(panels), 1), figsize=(6.5 * max(len(panels), 1), 4.2), squeeze=False
    )
    styles = ("-", "--", ":", "-.")
    for ax, panel in zip(axes[0], panels):
        steps = settings.META_STEPS
        ax.axvspan(0, IMITATION_END * steps, color="tab:orange", alpha=0.10, label="ELO: imitation")
        ax.axvspan(
            IMITATION_END * steps,
            HANDOVER_END * steps,
            color="tab:orange",
            alpha=0.04,
            label="ELO: handover",
        )
        for name, meta in runs.items():
            arm, seed = name.split("/")
            if not arm.endswith(panel):
                continue
            checks = meta["validation"]
            color, style = ARM_COLORS[arm], styles[int(seed[1:]) % len(styles)]
            ax.plot(
                [c["step"] for c in checks],
                [c["score"] for c in checks],
                style,
                color=color,
                marker=".",
                label=f"{settings.ARMS[arm].label} {seed}",
            )
            ax.scatter(
                [meta["best_validation_step"]],
                [meta["best_validation_score"]],
                s=80,
                facecolors="none",
                edgecolors=color,
            )
        ax.set_xlabel("outer step")
        ax.set_ylabel("selection score (validation; lower is better)")
        ax.set_title(f"{panel}: checks every {settings.CHECK_EVERY} steps (circles: selected)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def default_step_figure(summary: dict[str, Any], path: Path) -> Path:
    """`default_step.png`: the bars of `default_step_series` per cell, with the 1.25× bar."""
    plt = _pyplot()
    keys = list(summary["cells"])
    x = np.arange(len(keys))
    fig, ax = plt.subplots(figsize=(12, 4.8))
    series = default_step_series(summary)
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar(x + offset, np.asarray(values, float) - 1.0, width, bottom=1.0, label=label)
    ax.axhline(1.0, color="black", lw=1)
    ax.axhline(settings.DEFAULT_TOLERANCE, color="tab:red", lw=1, ls="--", label="1.25× bar")
    ax.set_xticks(x, [short_cell(k) for k in keys], rotation=45, ha="right")
    ax.set_ylabel("test loss at learning_rate=1 / tuned AdamW's")
    ax.set_title("Item 4: the default step on every held-out cell (test data, reported)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _curve(entry: dict[str, Any]) -> tuple[list[int], list[float]]:
    """An item-1 entry's test-loss curve as (steps, losses), nan where the JSON has null."""
    curve = entry["curve"]
    return curve["steps"], [common.nan_if_none(v) for v in curve["test_loss"]]


def long_horizon_figure(item1: dict[str, Any], path: Path) -> Path:
    """`long_horizon.png`: item 1's test-loss curves (`horizon_report.py`), a panel per task."""
    plt = _pyplot()
    tasks = item1["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    colors = {"pes": ARM_COLORS["pes_small_fc"], "elo": ARM_COLORS["elo_small_fc"]}
    for ax, (task, entry) in zip(axes[0], tasks.items()):
        labelled = set()
        for name, e in entry["checkpoints"].items():
            arm = name.split("_s")[0]
            label = None if arm in labelled else f"{arm.upper()} (small_fc study)"
            labelled.add(arm)
            ax.plot(*_curve(e), color=colors[arm], lw=1, alpha=0.8, label=label)
        if entry["adamw"] is not None:
            ax.plot(*_curve(entry["adamw"]), color="black", lw=2, label="tuned AdamW")
        drawn = [e for e in [*entry["checkpoints"].values(), entry["adamw"]] if e is not None]
        # The curves from their first check on: the step-0 loss would flatten them.
        late = [v for e in drawn for v in _curve(e)[1][1:] if math.isfinite(v)]
        if late:
            ax.set_ylim(0.97 * min(late), 1.03 * max(late))
        ax.set_title(f"{task} ({entry['pes_verdict']} for PES)", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel("test loss of the chosen setting")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"Item 1: {item1['horizon']:,} steps (mean over evaluation seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figures(results: Path) -> list[Path]:
    """Draw every figure into `results`/figures."""
    summary = common.load_json(results / "summary.json")
    out = results / "figures"
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        ratios_figure(summary, out / "ratios.png"),
        selection_figure(finished_runs(results), out / "selection_checks.png"),
        default_step_figure(summary, out / "default_step.png"),
        long_horizon_figure(summary["item1"], out / "long_horizon.png"),
    ]
    record = {
        "figures": [p.name for p in paths],
        "summary_report_commit": summary["provenance"]["report_commit"],
        "summary_status": summary["status"],
        "environment": common.environment(),
    }
    common.write_json(out / "figures.json", record)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    args = parser.parse_args()
    for path in figures(Path(args.results_dir)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
