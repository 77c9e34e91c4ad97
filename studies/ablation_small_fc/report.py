"""Tables, paired statistics, the decision rule and figures of the ELO ablation study.

Reads what `studies/ablation_small_fc/study.py` cached under its results directory and writes,
next to it, `summary.json`, `summary.md`, `curves_<horizon>.png` (held-out test-loss curves of
PES and ELO, mean ± 95% CI over meta-training seeds), `mechanisms_<horizon>.png` (the same for
ELO beside each of its variants and PES-uniform), and `meta_training.png` /
`meta_training_mechanisms.png` (the fused meta-loss next to the learned optimizer's own
validation score and the furthest inner step reached). Called by `python -m
studies.ablation_small_fc.study --report`; works on partial results (arms and seeds that are not
done yet are left out and listed).

Conventions:

- A meta-training seed's value on a task and horizon is the mean over the 3 evaluation seeds of
  the final test loss, each capped at its run's initial test loss (a run that diverged counts as
  no better than not training; divergence is counted separately). "Best" columns use the best
  test loss along each run instead of the final one.
- A seed *diverged* on a task and horizon when any of its evaluation runs ended above its
  initial test loss or non-finite.
- Paired differences are arm − PES on the same meta-training seed (same seed index: same
  initial learned optimizer and inner-problem randomness), with a t-interval at 95%.
- "final" evaluates the last checkpoint; "selected" the checkpoint with the best meta-validation
  score (MNIST-w32 validation split, never a test set), the same rule for every arm.
"""

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from studies.harness.jsonio import load_json
from studies.harness.provenance import git_commit
from studies.harness.stats import ci_band, paired, t_interval
from studies.harness.tables import fmt_delta


SELECTIONS = ("final", "selected")


def _seed_value(entry: dict[str, Any], metric: str) -> tuple[float, bool]:
    """(value, diverged) of one meta-training seed on one task and horizon."""
    curves = np.asarray(
        [[np.nan if v is None else v for v in row] for row in entry["test_loss_curve"]], float
    )
    initial = curves[:, 0]
    if metric == "final":
        raw = np.asarray([np.nan if v is None else v for v in entry["final_test_loss"]], float)
    else:
        raw = np.asarray([np.nan if v is None else v for v in entry["best_test_loss"]], float)
    capped = np.where(np.isfinite(raw), np.minimum(raw, initial), initial)
    return float(np.mean(capped)), bool(any(entry["diverged"]))


def collect(results: Path, arms: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """`{arm: {seed: {"meta": ..., "final": held-out dict, "selected": held-out dict}}}` for
    every finished run."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm in arms:
        for run in sorted((results / "runs" / arm).glob("s*")):
            if not (run / "evaluation.json").is_file():
                continue
            evaluation = load_json(run / "evaluation.json")
            final = evaluation.get("final")  # mechanism arms evaluate the selected one only
            selected = final if evaluation["best"].get("same_as") == "final" else evaluation["best"]
            out.setdefault(arm, {})[int(run.name[1:])] = {
                "meta": load_json(run / "meta.json"),
                "final": final,
                "selected": selected,
            }
    return out


def _adamw(results: Path, key: str) -> dict[str, Any] | None:
    path = results / "adamw" / f"{key}.json"
    return load_json(path) if path.is_file() else None


def parent(arm: str, arms: dict[str, Any]) -> str | None:
    """The arm a mechanism arm is compared with: PES for ELO and for PES variants, ELO for
    ELO variants (what removing or changing one part of ELO does), none for PES itself."""
    if arm == "pes":
        return None
    if arm == "elo" or arms[arm].preset.startswith("pes"):
        return "pes"
    return "elo"


def _per_seed(seeds, selection: str, key: str, metric: str) -> dict[int, tuple[float, bool]]:
    return {
        s: _seed_value(r[selection]["held_out"][key], metric)
        for s, r in seeds.items()
        if r[selection] is not None and key in r[selection]["held_out"]
    }


def summarise(results: Path, arms: dict[str, Any], tasks, horizons) -> dict[str, Any]:
    runs = collect(results, arms)
    keys = [f"{t}@{h}" for t in tasks for h in horizons]
    adamw = {}
    for key in keys:
        data = _adamw(results, key)
        if data is not None:
            final = np.asarray([np.nan if v is None else v for v in data["final_test_loss"]])
            best = np.asarray([np.nan if v is None else v for v in data["best_test_loss"]])
            adamw[key] = {
                "learning_rate": data["learning_rate"],
                "final": float(np.nanmean(final)),
                "best": float(np.nanmean(best)),
            }
    table: dict[str, Any] = {}
    for arm, seeds in runs.items():
        base = parent(arm, arms)
        table[arm] = {"seeds": sorted(seeds), "label": arms[arm].label, "parent": base}
        for selection in SELECTIONS:
            for metric in ("final", "best"):
                per_key = {}
                for key in keys:
                    values = _per_seed(seeds, selection, key, metric)
                    if not values:
                        continue
                    losses = np.asarray([v for v, _ in values.values()])
                    mean, half = t_interval(losses)
                    entry = {
                        "mean": mean,
                        "ci95": half,
                        "per_seed": {str(s): v for s, (v, _) in values.items()},
                        "diverged_seeds": sum(d for _, d in values.values()),
                        "n": len(values),
                    }
                    loss = {s: v for s, (v, _) in values.items()}
                    for name in ("pes", "elo"):
                        if name != arm and name in runs:
                            other = _per_seed(runs[name], selection, key, metric)
                            d = paired(loss, {s: v for s, (v, _) in other.items()})
                            if d is not None:
                                entry[f"vs_{name}"] = d
                    per_key[key] = entry
                table[arm][f"{selection}/{metric}"] = per_key
        table[arm]["meta"] = {
            "best_validation_score": t_interval(
                np.asarray([r["meta"]["best_validation_score"] for r in seeds.values()])
            ),
            "diverged_resets": int(sum(r["meta"]["totals"]["diverged"] for r in seeds.values())),
            "seconds_meta_steps": float(
                np.mean([r["meta"]["seconds_meta_steps"] for r in seeds.values()])
            ),
        }
    for arm in table:
        table[arm]["overview"] = overview(runs, arm, table[arm]["parent"], adamw, keys, horizons)
        table[arm]["in_distribution"] = in_distribution(runs[arm])
    return {
        "table": table,
        "adamw": adamw,
        "verdict": verdict(table, adamw, tasks, horizons, planned=arms),
        "missing": missing(results, arms, runs),
    }


def _ratio_to_adamw(seeds, adamw, keys) -> dict[int, float]:
    """Per seed: the validation-selected optimizer's final test loss over tuned AdamW's,
    averaged over every task and horizon (1 = AdamW's loss; seeds missing a cell are left out)."""
    out = {}
    for s, r in seeds.items():
        held_out = (r["selected"] or {}).get("held_out", {})
        if all(k in held_out for k in keys) and all(k in adamw for k in keys):
            out[s] = float(
                np.mean([_seed_value(held_out[k], "final")[0] / adamw[k]["final"] for k in keys])
            )
    return out


CHANCE_LOSS = math.log(10.0)  # cross-entropy of the uniform prediction over 10 classes


def in_distribution(seeds) -> dict[str, Any] | None:
    """The validation-selected optimizer on the meta-training task's validation split across
    parameter scales: per scale, mean ± 95% CI over meta-training seeds of the mean final loss
    over evaluation seeds, each run capped at chance (ln 10) as held-out runs are capped at their
    initial loss; a seed *diverged* at a scale when a run ended non-finite or above 2 ln 10."""
    entries = [
        r["selected"]["in_distribution"]
        for r in seeds.values()
        if r["selected"] is not None and r["selected"].get("in_distribution")
    ]
    if not entries:
        return None
    scales = entries[0]["scales"]
    raw = np.asarray(
        [[[np.nan if v is None else v for v in row] for row in e["losses"]] for e in entries],
        float,
    )  # [seed, scale, evaluation seed]
    capped = np.where(np.isfinite(raw), np.minimum(raw, CHANCE_LOSS), CHANCE_LOSS).mean(axis=2)
    diverged = (~np.isfinite(raw) | (raw > 2 * CHANCE_LOSS)).any(axis=2)
    return {
        "task": entries[0]["task"],
        "num_steps": entries[0]["num_steps"],
        "scales": scales,
        "n": len(entries),
        "loss": [t_interval(capped[:, i]) for i in range(len(scales))],
        "diverged_seeds": [int(diverged[:, i].sum()) for i in range(len(scales))],
    }


def overview(runs, arm: str, base: str | None, adamw, keys, horizons) -> dict[str, Any]:
    """One line per arm (validation-selected checkpoints): the loss ratio to AdamW averaged
    over all cells (a summary across tasks, not the decision rule), its paired difference to the
    parent arm, and held-out divergence at 5K steps and longer."""
    ratios = _ratio_to_adamw(runs[arm], adamw, keys)
    long = [k for k in keys if int(k.split("@")[1]) >= 5000]
    diverged = sum(
        _seed_value(r["selected"]["held_out"][k], "final")[1]
        for r in runs[arm].values()
        if r["selected"] is not None
        for k in long
        if k in r["selected"]["held_out"]
    )
    out: dict[str, Any] = {
        "ratio_to_adamw": t_interval(np.asarray(list(ratios.values()))) if ratios else None,
        "ratio_per_seed": {str(s): v for s, v in ratios.items()},
        "diverged_seed_cells_at_5k_10k": int(diverged),
        "cells_at_5k_10k": len(long) * len(runs[arm]),
    }
    if base is not None and base in runs:
        out["ratio_vs_parent"] = paired(ratios, _ratio_to_adamw(runs[base], adamw, keys))
    return out


def missing(results: Path, arms: dict[str, Any], runs) -> list[str]:
    return [
        f"{arm} s{seed}"
        for arm, spec in arms.items()
        for seed in range(spec.seeds)
        if seed not in runs.get(arm, {})
    ]


def verdict(table, adamw, tasks, horizons, planned) -> dict[str, Any]:
    """SCIENCE_REVIEW's decision rule for ELO vs PES, and the AdamW goal; `decided` only once
    PES and ELO have all their planned meta-training seeds (before that it is provisional)."""
    if "elo" not in table or "pes" not in table:
        return {"decided": False, "reason": "ELO or PES has no finished seed yet"}
    long = [h for h in horizons if h >= 5000]
    checks = {}
    for selection in SELECTIONS:
        wins = []
        for task in tasks:
            significant = True
            for h in long:
                d = table["elo"][f"{selection}/final"].get(f"{task}@{h}", {}).get("vs_pes")
                if d is None or not (d["mean"] < 0 and d["mean"] + d["ci95"] < 0):
                    significant = False
            wins.append(significant)
        checks[selection] = {"tasks_won": int(sum(wins)), "per_task": dict(zip(tasks, wins))}
    diverged = {
        arm: sum(
            table[arm]["final/final"][k]["diverged_seeds"]
            for k in table[arm]["final/final"]
            if int(k.split("@")[1]) in long
        )
        for arm in ("elo", "pes")
    }
    beats = (
        all(checks[s]["tasks_won"] >= 2 for s in SELECTIONS) and diverged["elo"] <= diverged["pes"]
    )
    near_adamw = {}
    for key, ref in adamw.items():
        entry = table["elo"]["selected/final"].get(key)
        if entry is not None and ref["final"] > 0:
            near_adamw[key] = entry["mean"] / ref["final"]
    short = {
        arm: f"{len(table[arm]['seeds'])} of {planned[arm].seeds} seeds"
        for arm in ("pes", "elo")
        if len(table[arm]["seeds"]) < planned[arm].seeds
    }
    return {
        "decided": not short,
        **({"provisional": short} if short else {}),
        "elo_beats_pes": bool(beats),
        "significant_wins_at_5k_and_10k": checks,
        "diverged_seed_task_horizons_at_5k_10k": diverged,
        "elo_over_adamw_final_test_loss": near_adamw,
        "within_10pct_of_adamw_on": sorted(k for k, r in near_adamw.items() if r <= 1.1),
        "seeds": {"elo": table["elo"]["seeds"], "pes": table["pes"]["seeds"]},
    }


def _fmt(entry: dict[str, Any] | None, versus: str | None = None) -> str:
    if entry is None:
        return "–"
    text = f"{entry['mean']:.3f}"
    if not math.isnan(entry["ci95"]):
        text += f" ± {entry['ci95']:.3f}"
    if entry.get("diverged_seeds"):
        text += f" ({entry['diverged_seeds']}/{entry['n']} div)"
    if versus is not None and f"vs_{versus}" in entry:
        text += "<br>" + fmt_delta(entry[f"vs_{versus}"])
    return text


def _held_out_table(summary, arms: list[str], selection: str, keys, versus) -> list[str]:
    table, adamw = summary["table"], summary["adamw"]
    header = [f"{table[a]['label']} (n={len(table[a]['seeds'])})" for a in arms]
    lines = ["| task @ steps | " + " | ".join(header) + " | AdamW, tuned (lr) |"]
    lines.append("|---" * (len(arms) + 2) + "|")
    for k in keys:
        cells = [_fmt(table[a][f"{selection}/final"].get(k), versus(a)) for a in arms]
        ref = f"{adamw[k]['final']:.3f} ({adamw[k]['learning_rate']:.2g})" if k in adamw else "–"
        lines.append(f"| {k.replace('@', ' @ ')} | " + " | ".join(cells) + f" | {ref} |")
    return lines + [""]


def _in_distribution_table(table) -> list[str]:
    rows = {a: r["in_distribution"] for a, r in table.items() if r.get("in_distribution")}
    if not rows:
        return []
    first = next(iter(rows.values()))
    lines = [
        "### In distribution: the meta-training task across parameter scales",
        "",
        f"`{first['task']}`, {first['num_steps']} steps, validation split, the "
        "validation-selected optimizer alone on the task reparameterised by a scale s: it sees "
        "parameters w/s and gradients s∇w (meta-training draws log-uniform scales in [1e-3, "
        "1e3]). Final loss, each run capped at chance (ln 10 = 2.303), mean ± 95% CI over "
        "meta-training seeds; `div`: seeds with a run that ended non-finite or above 2 ln 10.",
        "",
        "| arm (n) | " + " | ".join(f"scale {s:g}" for s in first["scales"]) + " |",
        "|---" * (len(first["scales"]) + 1) + "|",
    ]
    for arm, row in rows.items():
        cells = [
            f"{m:.3f}"
            + ("" if math.isnan(h) else f" ± {h:.3f}")
            + (f" ({d}/{row['n']} div)" if d else "")
            for (m, h), d in zip(row["loss"], row["diverged_seeds"])
        ]
        lines.append(f"| {table[arm]['label']} ({row['n']}) | " + " | ".join(cells) + " |")
    return lines + [""]


def markdown(summary: dict[str, Any], tasks, horizons, environment: dict[str, Any]) -> str:
    table = summary["table"]
    run_commits = ", ".join(summary.get("run_commits", [])) or "none yet"
    keys = [f"{t}@{h}" for t in tasks for h in horizons]
    lines = [
        "Generated by `python -m studies.ablation_small_fc run --report` at commit "
        f"{summary.get('report_commit')}; study settings fixed at commit "
        f"{environment.get('commit')}; runs meta-trained at commit(s) {run_commits} by "
        "`elo meta-train` with its default CPU device split "
        f"(jax {environment.get('jax')}, {environment.get('cpu')}).",
        "",
        "Final test loss of the learned optimizer alone, mean ± 95% CI over meta-training seeds "
        "(each seed: mean of 3 evaluation runs, capped at the initial loss); `div`: seeds with a "
        "diverged evaluation run; Δ: paired difference over meta-training seeds (negative = "
        "lower loss than the arm compared with).",
        "",
    ]
    main = [a for a in ("pes", "elo") if a in table]
    for selection in SELECTIONS:
        lines.append(
            f"### PES and ELO, checkpoint: {selection} "
            + ("(last outer step)" if selection == "final" else "(best meta-validation score)")
        )
        lines.append("")
        lines += _held_out_table(
            summary, main, selection, keys, lambda a: "pes" if a != "pes" else None
        )
    lines += [
        "### Every arm at a glance (validation-selected checkpoints)",
        "",
        "Loss / AdamW: each seed's final test loss over tuned AdamW's, averaged over the "
        f"{len(keys)} task × horizon cells (1 = AdamW; a summary across tasks, not the decision "
        "rule), mean ± 95% CI; Δ: its paired difference to the arm compared with. Diverged: "
        "seed × task cells at 5K steps and longer with a diverged evaluation run. Resets: "
        "inner problems reset for divergence during meta-training, all seeds together.",
        "",
        "| arm (n) | compared with | loss / AdamW | Δ | diverged | meta-validation score | "
        "resets |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, row in table.items():
        o = row["overview"]
        ratio = o["ratio_to_adamw"]
        ratio_text = (
            "–"
            if ratio is None
            else f"{ratio[0]:.3f}" + ("" if math.isnan(ratio[1]) else f" ± {ratio[1]:.3f}")
        )
        delta = o.get("ratio_vs_parent")
        score, half = row["meta"]["best_validation_score"]
        score_text = f"{score:.3f}" + ("" if math.isnan(half) else f" ± {half:.3f}")
        base = row["parent"]
        lines.append(
            f"| {row['label']} ({len(row['seeds'])}) | "
            f"{table[base]['label'] if base in table else '–'} | {ratio_text} | "
            f"{fmt_delta(delta) if delta else '–'} | "
            f"{o['diverged_seed_cells_at_5k_10k']}/{o['cells_at_5k_10k']} | {score_text} | "
            f"{row['meta']['diverged_resets']} |"
        )
    lines.append("")
    lines += _in_distribution_table(table)
    mechanisms = [a for a in table if a not in ("pes", "elo")]
    if mechanisms:
        lines += [
            "### Mechanism arms (validation-selected checkpoints)",
            "",
            "Δ: paired difference to the arm each is a variant of (ELO for the ELO variants, "
            "PES for PES-uniform).",
            "",
        ]
        lines += _held_out_table(
            summary,
            [a for a in ("elo",) if a in table] + mechanisms,
            "selected",
            keys,
            lambda a: table[a]["parent"] if a != "elo" else None,
        )
    v = summary["verdict"]
    lines.append("### Decision rule")
    lines.append("")
    lines.append("```json")
    lines.append(json.dumps(v, indent=1))
    lines.append("```")
    if summary["missing"]:
        lines.append("")
        lines.append("Not finished yet: " + ", ".join(summary["missing"]) + ".")
    return "\n".join(lines) + "\n"


def figures(results: Path, arms, tasks, horizons) -> list[Path]:
    """Held-out curves (PES and ELO; ELO beside its variants) at every horizon, and the
    meta-training curves of the main arms and of the mechanism arms."""
    import matplotlib

    matplotlib.use("Agg")

    runs = collect(results, arms)
    color = {arm: f"C{i}" for i, arm in enumerate(arms)}  # one colour per arm in every figure
    main = [a for a in ("pes", "elo") if a in runs]
    mechanisms = [a for a in runs if a not in ("pes", "elo")]
    written = []
    for horizon in horizons:
        written.append(
            _held_out_figure(results, runs, arms, color, main, tasks, horizon, f"curves_{horizon}")
        )
        if mechanisms:
            shown = ["elo", *mechanisms]
            written.append(
                _held_out_figure(
                    results, runs, arms, color, shown, tasks, horizon, f"mechanisms_{horizon}"
                )
            )
    written.append(_meta_training_figure(results, runs, arms, color, main, "meta_training"))
    if mechanisms:
        shown = [a for a in ("elo",) if a in runs] + mechanisms
        written.append(
            _meta_training_figure(results, runs, arms, color, shown, "meta_training_mechanisms")
        )
    return written


def _nan(rows) -> np.ndarray:
    return np.asarray([[np.nan if v is None else v for v in row] for row in rows], float)


def _banded(shown) -> set[str]:
    """The arms a figure draws a CI band for: the first shown and PES. With 3 seeds a t-interval is
    ±4.3 standard errors, and seven such bands hide the means."""
    return {shown[0], "pes"}


def _held_out_figure(results, runs, arms, color, shown, tasks, horizon, name) -> Path:
    """Test-loss curves of `shown` on every task, with CI bands for `_banded(shown)`."""
    import matplotlib.pyplot as plt

    banded = _banded(shown)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        key = f"{task}@{horizon}"
        for arm in (a for a in shown if a in runs):
            entries = [r["selected"]["held_out"].get(key) for r in runs[arm].values()]
            entries = [e for e in entries if e is not None]
            if not entries:
                continue
            steps = np.asarray(entries[0]["steps"])
            per_seed = np.asarray([np.nanmean(_nan(e["test_loss_curve"]), axis=0) for e in entries])
            mean, half = ci_band(per_seed)
            ax.plot(steps, mean, color=color[arm], label=f"{arms[arm].label} (n={len(entries)})")
            if arm in banded:
                low = np.maximum(mean - half, 0.0)
                ax.fill_between(steps, low, mean + half, alpha=0.15, color=color[arm])
        ref = _adamw(results, key)
        if ref is not None:
            curve = np.nanmean(_nan(ref["test_loss_curve"]), axis=0)
            ax.plot(ref["steps"], curve, "k--", label="AdamW (tuned)")
        if ax.lines:
            initial = [line.get_ydata()[0] for line in ax.lines]
            ax.set_ylim(0, 1.3 * float(np.nanmax(initial)))
        ax.set_title(key)
        ax.set_xlabel("inner step")
        ax.set_ylabel("test loss")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(
        f"Held-out test loss, learned optimizer alone, {horizon} steps "
        "(validation-selected checkpoint; mean over meta-training seeds, "
        f"95% CI band for {' and '.join(arms[a].label for a in shown if a in banded)})"
    )
    fig.tight_layout()
    path = results / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _meta_training_figure(results, runs, arms, color, shown, name) -> Path:
    """The fused meta-loss, the learned optimizer's own validation score, and how far inner
    problems reach (the buffer carries ELO's far beyond the sampled horizons)."""
    import matplotlib.pyplot as plt

    banded = _banded(shown)
    fig, axes = plt.subplots(1, 3, figsize=(16, 3.8))
    for arm in (a for a in shown if a in runs):
        metas = [r["meta"] for r in runs[arm].values()]
        steps = np.asarray(metas[0]["curves"]["step"])
        for ax, curve in ((axes[0], "meta_loss"), (axes[2], "max_inner_step")):
            n = min(len(m["curves"][curve]) for m in metas)
            mean, half = ci_band(_nan(m["curves"][curve][:n] for m in metas))
            ax.plot(steps[:n], mean, color=color[arm], label=arms[arm].label)
            if arm in banded:
                low = np.maximum(mean - half, 0.0)
                ax.fill_between(steps[:n], low, mean + half, alpha=0.15, color=color[arm])
        m = min(len(x["validation"]) for x in metas)
        vsteps = np.asarray([c["step"] for c in metas[0]["validation"][:m]])
        mean, half = ci_band(np.asarray([[c["score"] for c in x["validation"][:m]] for x in metas]))
        axes[1].plot(
            vsteps,
            mean,
            color=color[arm],
            marker="o",
            markersize=3,
            label=f"{arms[arm].label} (n={len(metas)})",
        )
        if arm in banded:
            low = np.maximum(mean - half, 0.0)
            axes[1].fill_between(vsteps, low, mean + half, alpha=0.15, color=color[arm])
    axes[0].set_title("meta-loss of the trained (fused) trajectories")
    axes[1].set_title("learned optimizer alone: meta-validation score")
    axes[2].set_title("furthest inner step any inner problem reached")
    for ax in axes:
        ax.set_xlabel("outer step")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    path = results / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(results: Path, arms, tasks, horizons) -> None:
    """Write the summary (JSON and markdown) and the figures (the Results page of the docs
    includes `summary.md` and shows copies of the figures, made by a reviewed `cp`:
    studies/README.md)."""
    environment = load_json(results / "settings.json").get("environment", {})
    summary = summarise(results, arms, tasks, horizons)
    summary["environment"] = environment
    summary["run_commits"] = sorted(
        {
            run["meta"].get("environment", {}).get("commit", "unknown")
            for seeds in collect(results, arms).values()
            for run in seeds.values()
        }
    )
    summary["report_commit"] = git_commit()
    (results / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=True) + "\n")
    (results / "summary.md").write_text(markdown(summary, tasks, horizons, environment))
    written = figures(results, arms, tasks, horizons) if collect(results, arms) else []
    for path in [results / "summary.json", results / "summary.md", *written]:
        print(f"wrote {path}")
