"""Quality of meta-trained learned optimizers on held-out tasks, at an equal CPU budget.

Meta-trains PES-small_fc and ELO-small_fc (the `*_cpu` presets) with the same number of outer
steps, hence the same number of inner steps (every outer step runs `particles x 2 x R` inner
steps per task group in both), through the `elo meta-train` command (resumable: rerunning skips
finished work). ELO's supervision ramp is scaled to the budget (from 5% to 50% of the outer
steps, as the preset's 50 -> 500 of 1000). Then evaluates, on held-out tasks and at a short and
a long horizon, with the same seeds:

- the PES-trained and the ELO-trained optimizer (alone, told the horizon);
- the untrained optimizer (the runs' initial weights);
- AdamW with its constant learning rate tuned on a log grid over [1e-4, 1e-1], selected by the
  final loss on the train split (mean over seeds).

Writes `quality.json` (budget, meta-training summary, final and best metrics, mean test-loss
curves) and `quality.png` (test loss of every optimizer, one panel per task and horizon) to
`--out-dir`, plus `quality_meta.png` (the meta-training curves). Prints a table.

    python -m studies.quality.study                          # the full budget (hours on CPU)
    python -m studies.quality.study --meta-steps 100 --horizons 1000 --seeds 2 --lr-num 4 \\
        --tasks mlp-w128-d3_fashionmnist-8x8x1,conv-c16-d2_cifar10-8x8x3   # minutes
"""

import argparse
import json
import platform
import time
from pathlib import Path

import jax
import jax.random as jr
import numpy as np

import elo
from elo import evaluate, load_optimizer, log_grid, lr_sweep, read_metrics
from elo.cli import main as elo_main


META_TASKS = "mlp-w32-d1_mnist-8x8x1,mlp-w32-d1_fashionmnist-8x8x1,mlp-w32-d1_cifar10-8x8x3"
HELD_OUT = "mlp-w128-d3_fashionmnist-8x8x1,mlp-w64-d2_cifar10-8x8x3,conv-c16-d2_cifar10-8x8x3"
METHODS = {"PES-small_fc": "pes_small_fc_cpu", "ELO-small_fc": "elo_small_fc_cpu"}


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--meta-steps", type=int, default=1000, help="outer steps per method: the budget (1000)"
    )
    parser.add_argument("--meta-tasks", default=META_TASKS, help="meta-training tasks (8x8)")
    parser.add_argument("--tasks", default=HELD_OUT, help="held-out evaluation tasks")
    parser.add_argument("--horizons", default="1000,5000", help="evaluation lengths (1000,5000)")
    parser.add_argument("--seeds", type=int, default=3, help="evaluation seeds (3)")
    parser.add_argument("--lr-num", type=int, default=7, help="AdamW grid size over 1e-4..1e-1")
    parser.add_argument("--evals", type=int, default=10, help="evaluation points per run (10)")
    parser.add_argument("--seed", type=int, default=0, help="meta-training seed (0)")
    parser.add_argument("--runs-dir", default="runs/quality", help="meta-training run dirs")
    parser.add_argument(
        "--out-dir", default=str(Path(__file__).parent / "results"), help="JSON and PNG go here"
    )
    parser.add_argument("--name", default="quality", help="output file stem (quality)")
    parser.add_argument(
        "--replot", action="store_true", help="only redraw the figure from the JSON file"
    )
    return parser.parse_args()


def budget_title(document: dict) -> str:
    b = document["budget"]
    return (
        f"Budget: {b['outer_steps_per_method']} outer steps = {b['inner_steps_per_method']:,} "
        f"inner steps per method (meta-trained on {len(b['meta_tasks'])} 8x8 task(s)); "
        f"{b['evaluation_seeds']} evaluation seeds, mean ± std"
    )


def meta_train(method: str, preset: str, args, runs_dir: Path) -> dict:
    out = runs_dir / f"{method}-{args.meta_steps}"
    argv = ["meta-train", "--preset", preset, "--steps", str(args.meta_steps), "--out", str(out)]
    argv += ["--seed", str(args.seed), "--set", f"tasks={args.meta_tasks}"]
    argv += ["--checkpoint-every", str(max(1, args.meta_steps // 10))]
    if preset.startswith("elo"):
        start, end = round(0.05 * args.meta_steps), round(0.5 * args.meta_steps)
        argv += ["--set", f"supervision_start={start}", "--set", f"supervision_end={end}"]
    started = time.perf_counter()
    code = elo_main(argv)
    if code != 0:
        raise SystemExit(f"meta-training {method} failed with status {code}")
    records = read_metrics(out)
    config = json.loads((out / "config.json").read_text())["config"]
    groups = len(config["tasks"])
    inner = args.meta_steps * groups * config["num_particles"] * 2 * config["truncation_length"]
    tail = records[-max(1, len(records) // 10) :]
    return {
        "run_dir": str(out),
        "preset": preset,
        "outer_steps": args.meta_steps,
        "inner_steps": inner,
        "seconds_this_call": time.perf_counter() - started,
        "seconds_meta_steps": float(sum(r["seconds"] for r in records)),
        "final_meta_loss": float(np.mean([r["meta_loss"] for r in tail])),
        "buffer_resumes": int(sum(r["buffer_resumes"] for r in records)),
        "max_inner_step": int(max(r["max_inner_step"] for r in records)),
    }


def summarise(result, seconds: float) -> dict:
    data = result.to_dict()
    curves = data["curves"]
    return {
        "learning_rate": result.learning_rate,
        "seconds": seconds,
        "final": data["final"],
        "best": data["best"],
        "steps": data["steps"],
        "test_loss": {k: curves["test_loss"][k] for k in ("mean", "std")},
        "test_accuracy": {k: curves["test_accuracy"][k] for k in ("mean", "std")},
        "train_loss": {k: curves["train_loss"][k] for k in ("mean", "std")},
    }


def fmt(pair: dict) -> str:
    if pair["mean"] is None:
        return "diverged"
    return f"{pair['mean']:.3f} ± {pair['std']:.3f}"


def plot(
    entries: list[dict], tasks: list[str], horizons: list[int], path: Path, title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        len(tasks), len(horizons), figsize=(5.5 * len(horizons), 3.6 * len(tasks)), squeeze=False
    )
    for i, task in enumerate(tasks):
        for j, horizon in enumerate(horizons):
            ax = axes[i][j]
            for e in entries:
                if e["task"] != task or e["horizon"] != horizon:
                    continue
                mean = np.asarray([np.nan if v is None else v for v in e["test_loss"]["mean"]])
                std = np.asarray([np.nan if v is None else v for v in e["test_loss"]["std"]])
                label = e["optimizer"]
                if e["learning_rate"] is not None:
                    label += f" (lr {e['learning_rate']:.2g})"
                ax.plot(e["steps"], mean, marker="o", markersize=3, label=label)
                ax.fill_between(e["steps"], mean - std, mean + std, alpha=0.2)
            ax.set_title(f"{task}, {horizon} steps", fontsize=9)
            ax.set_xlabel("step")
            ax.set_ylabel("test loss")
            finite = [
                v
                for e in entries
                if e["task"] == task and e["horizon"] == horizon
                for v in e["test_loss"]["mean"]
                if v is not None
            ]
            if finite:
                ax.set_ylim(min(finite) * 0.95, min(max(finite), 2 * np.log(10)) * 1.05)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    horizons = [int(h) for h in args.horizons.split(",") if h]
    runs_dir, out_dir = Path(args.runs_dir), Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.replot:
        document = json.loads((out_dir / f"{args.name}.json").read_text())
        entries = document["results"]
        tasks = list(dict.fromkeys(e["task"] for e in entries))
        horizons = list(dict.fromkeys(e["horizon"] for e in entries))
        plot(entries, tasks, horizons, out_dir / f"{args.name}.png", budget_title(document))
        return

    meta = {m: meta_train(m, preset, args, runs_dir) for m, preset in METHODS.items()}
    elo_main(
        [
            "plot",
            *(meta[m]["run_dir"] for m in METHODS),
            "--out",
            str(out_dir / f"{args.name}_meta.png"),
        ]
    )
    optimizers = {m: load_optimizer(meta[m]["run_dir"]) for m in METHODS}
    # The runs' initial learned optimizer: `elo meta-train --seed S` initialises with the first
    # half of the split of `jax.random.key(S)` (see `elo.cli`).
    init_key, _ = jr.split(jr.key(args.seed))
    config = elo.presets.get_preset("pes_small_fc_cpu")
    optimizers["untrained small_fc"] = elo.init(config, key=init_key).learned_optimizer

    entries = []
    for task in tasks:
        for horizon in horizons:
            eval_every = max(1, horizon // args.evals)
            common = dict(num_steps=horizon, seeds=args.seeds, eval_every=eval_every)
            for name, lo in optimizers.items():
                started = time.perf_counter()
                result = evaluate(lo, task, name=name, **common)
                entry = summarise(result, time.perf_counter() - started)
                entries.append({"task": task, "horizon": horizon, "optimizer": name, **entry})
                print(f"{task} {horizon} {name}: test loss {fmt(entry['final']['test_loss'])}")
            started = time.perf_counter()
            grid = log_grid(1e-4, 1e-1, args.lr_num)
            best, _ = lr_sweep("adamw", task, learning_rates=grid, **common)
            entry = summarise(best, time.perf_counter() - started)
            entries.append(
                {"task": task, "horizon": horizon, "optimizer": "AdamW (tuned)", **entry}
            )
            print(f"{task} {horizon} AdamW: test loss {fmt(entry['final']['test_loss'])}")

    budget = {
        "outer_steps_per_method": args.meta_steps,
        "inner_steps_per_method": meta["PES-small_fc"]["inner_steps"],
        "meta_tasks": args.meta_tasks.split(","),
        "evaluation_seeds": args.seeds,
        "horizons": horizons,
        "adamw_grid": log_grid(1e-4, 1e-1, args.lr_num),
        "adamw_selection": "lowest final train-split loss, mean over seeds",
    }
    document = {
        "benchmark": "quality",
        "budget": budget,
        "meta_training": meta,
        "results": entries,
        "environment": {
            "elo": elo.__version__,
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "devices": jax.device_count(),
            "machine": platform.machine(),
            "processor": platform.processor(),
            "python": platform.python_version(),
        },
    }
    (out_dir / f"{args.name}.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(entries, tasks, horizons, out_dir / f"{args.name}.png", budget_title(document))

    print()
    print(
        f"Budget: {args.meta_steps} outer steps = {budget['inner_steps_per_method']:,} inner "
        f"steps per method on {', '.join(budget['meta_tasks'])}; {args.seeds} evaluation seeds."
    )
    for m in METHODS:
        print(
            f"  {m}: {meta[m]['seconds_meta_steps']:.0f} s of meta-steps, final meta-loss "
            f"{meta[m]['final_meta_loss']:.3f}"
        )
    print()
    print("| task | steps | optimizer | final train loss | final test loss | final test acc |")
    print("|---|---|---|---|---|---|")
    for e in entries:
        name = e["optimizer"]
        if e["learning_rate"] is not None:
            name += f" (lr {e['learning_rate']:.2g})"
        print(
            f"| {e['task']} | {e['horizon']} | {name} | {fmt(e['final']['train_loss'])} | "
            f"{fmt(e['final']['test_loss'])} | {fmt(e['final']['test_accuracy'])} |"
        )
    print(f"\nwrote {out_dir / (args.name + '.json')}, {out_dir / (args.name + '.png')}")


if __name__ == "__main__":
    main()
