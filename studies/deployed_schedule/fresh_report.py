"""The main runs' held-out verdicts (`main_rule.md` §3): H1, H2 and Q3 on the fresh cells of
§2, from committed results only.

    python -m studies.deployed_schedule fresh-report   # results/fresh_summary.{json,md}

The arms, each three checkpoints paired by seed: this study's ELO-Celo2 and PES-Celo2 selected
checkpoints (`results/fresh/<method>/s<seed>/`), and the headline's constant-step PES-Celo2
(seed 0 is the shipped `celo2`, read from `studies/fresh_cells/results/celo2/`; seeds 1 and 2
from `results/fresh/headline_pes_celo2/`). The references are the fresh cells' committed
results: tuned AdamW, tuned Muon, and the marks to beat, `celo2` and the published Celo2.
A checkpoint's value on a cell is its tuned test loss (mean over evaluation seeds, each capped
at its initial loss); an arm's value is the mean of its three checkpoints'. A verdict is stated
once every cell has every checkpoint's result and AdamW's; until then it is "pending".

It reads nothing before the ship decision over the headline cells (`results/ship_rule.json`,
`main_rule.md` §4) is committed as it is, so that no held-out result can decide what ships; and
it reads the shipped `celo2`'s results only for the weights it had when the rule was written
(`settings.MARKS_CELO2_SHA256`). It states that decision too: the winner, and whether it ships
as `celo2` or nothing new won.
"""

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.deployed_schedule import fresh, settings, ship_rule
from studies.fresh_cells import settings as fresh_settings


HERE = Path(__file__).parent
RESULTS = HERE / "results"
FRESH_CELLS_RESULTS = HERE.parent / "fresh_cells" / "results"
ARMS = {
    "elo_celo2": "ELO-Celo2 (deployed schedule)",
    "pes_celo2": "PES-Celo2 (deployed schedule)",
    "headline_pes_celo2": "PES-Celo2 (constant step, headline)",
}


def cell_key(task: str, horizon: int) -> str:
    return f"{task}@{horizon}"


def load_result(path: Path) -> dict[str, Any]:
    """One tuned result; a result of the fresh cells' `celo2` only for the pinned weights
    (`settings.MARKS_CELO2_SHA256`: what `celo2` was when main_rule.md was written)."""
    result = common.load_json(path)
    if path.parent == FRESH_CELLS_RESULTS / "celo2":
        weights = result.get("weights_sha256")
        if weights != settings.MARKS_CELO2_SHA256:
            raise SystemExit(
                f"{path} is for celo2 weights {weights}, not the ones main_rule.md §2 compares "
                f"({settings.MARKS_CELO2_SHA256[:12]}...): restore the results made with them "
                "(git checkout the file as committed when main_rule.md was written)."
            )
    return result


def checkpoint_files(results: Path, arm: str, key: str) -> dict[int, Path]:
    """Where each seed's result of `arm` on the cell `key` is (present or not)."""
    files = {}
    for seed in settings.MAIN_SEEDS:
        if arm == "headline_pes_celo2" and seed == 0:  # the shipped celo2
            files[seed] = FRESH_CELLS_RESULTS / "celo2" / f"{key}.json"
        else:
            files[seed] = results / "fresh" / arm / f"s{seed}" / f"{key}.json"
    return files


def failed(result: dict[str, Any]) -> bool:
    """Whether the chosen value diverged or ended above its initial loss on any seed."""
    row = result["sweep"][result["selected"]]
    return any(row["diverged"]) or any(row["worse_than_initial"])


def reference(name: str, key: str) -> dict[str, Any] | None:
    path = FRESH_CELLS_RESULTS / name / f"{key}.json"
    return load_result(path) if path.is_file() else None


def ratio(per_seed: dict[int, float], to: dict[str, Any] | None) -> dict[str, Any] | None:
    """Mean and 95% half-width over seeds of each checkpoint's test loss over `to`'s."""
    if to is None or not per_seed:
        return None
    mean, half = common.t_interval(np.array([v / to["test_loss"] for v in per_seed.values()]))
    return {"mean": mean, "ci95": common.finite_or_none(half)}


def cell_rows(results: Path, task: str, horizon: int) -> dict[str, Any]:
    """One cell: each arm's per-seed values, value, failures and ratios; the references."""
    key = cell_key(task, horizon)
    adamw, muon = reference("adamw", key), reference("muon", key)
    arms = {}
    for arm in ARMS:
        found = {
            seed: load_result(path)
            for seed, path in checkpoint_files(results, arm, key).items()
            if path.is_file()
        }
        per_seed = {seed: r["test_loss"] for seed, r in found.items()}
        complete = len(found) == len(settings.MAIN_SEEDS)
        arms[arm] = {
            "per_seed": {str(s): v for s, v in per_seed.items()},
            "value": float(np.mean(list(per_seed.values()))) if complete else None,
            "failures": sum(failed(r) for r in found.values()),
            "vs_adamw": ratio(per_seed, adamw),
            "vs_muon": ratio(per_seed, muon),
        }
    marks = {name: reference(name, key) for name in ("celo2", "celo2_published")}
    return {
        "horizon": horizon,
        "arms": arms,
        "adamw": None if adamw is None else adamw["test_loss"],
        "muon": None if muon is None else muon["test_loss"],
        "marks": {n: None if r is None else r["test_loss"] for n, r in marks.items()},
    }


def paired(cell: dict[str, Any], arm: str, baseline: str) -> dict[str, Any] | None:
    """`arm` − `baseline` paired by seed on one cell (`studies.harness.stats.paired`)."""
    values = {int(s): v for s, v in cell["arms"][arm]["per_seed"].items()}
    base = {int(s): v for s, v in cell["arms"][baseline]["per_seed"].items()}
    return common.paired(values, base)


def h1(cells: dict[str, Any], complete: bool) -> dict[str, Any]:
    """ELO-Celo2's arm at or below tuned AdamW on at least two thirds of the cells; beside
    it, the same count for the other arms and against the marks."""
    needed = math.ceil(fresh_settings.VERDICT_SHARE * len(cells))
    counts = {
        arm: {
            against: sum(
                common.at_or_below(c["arms"][arm]["value"], ref)
                for c in cells.values()
                for ref in [c["adamw"] if against == "adamw" else c["marks"][against]]
            )
            for against in ("adamw", "celo2", "celo2_published")
        }
        for arm in ARMS
    }
    at_or_below = counts["elo_celo2"]["adamw"]
    verdict = "pending" if not complete else ("met" if at_or_below >= needed else "not met")
    return {"verdict": verdict, "at_or_below": at_or_below, "needed": needed, "counts": counts}


def h2(cells: dict[str, Any], complete: bool) -> dict[str, Any]:
    """ELO − PES paired by seed, 95% interval entirely below 0 on at least half of the cells
    of `settings.H2_MIN_HORIZON` steps or more, and ELO with no more failed seed × cell pairs."""
    long = [k for k, c in cells.items() if c["horizon"] >= settings.H2_MIN_HORIZON]
    differences = {k: paired(cells[k], "elo_celo2", "pes_celo2") for k in cells}
    below = [
        k
        for k in long
        if (d := differences[k]) is not None
        and d["ci95"] is not None
        and math.isfinite(d["ci95"])
        and d["mean"] + d["ci95"] < 0
    ]
    failures = {a: sum(c["arms"][a]["failures"] for c in cells.values()) for a in ARMS}
    needed = math.ceil(len(long) / 2)
    met = len(below) >= needed and failures["elo_celo2"] <= failures["pes_celo2"]
    return {
        "verdict": "pending" if not complete else ("met" if met else "not met"),
        "long_cells": long,
        "below_zero": below,
        "needed": needed,
        "failures": failures,
        "differences": differences,
    }


def q3(cells: dict[str, Any], complete: bool) -> dict[str, Any]:
    """Does training with the deployed schedule help PES-Celo2? Yes when its arm is lower
    than the constant-step arm on at least two thirds of the cells, no when on at most a
    third, otherwise no clear difference."""
    lower = [
        k
        for k, c in cells.items()
        if (a := c["arms"]["pes_celo2"]["value"]) is not None
        and (b := c["arms"]["headline_pes_celo2"]["value"]) is not None
        and a < b
    ]
    yes = math.ceil(fresh_settings.VERDICT_SHARE * len(cells))
    no = len(cells) - yes
    if not complete:
        answer = "pending"
    else:
        answer = "yes" if len(lower) >= yes else "no" if len(lower) <= no else "no clear difference"
    return {
        "answer": answer,
        "lower": lower,
        "yes_at_least": yes,
        "no_at_most": no,
        "differences": {k: paired(c, "pes_celo2", "headline_pes_celo2") for k, c in cells.items()},
    }


def ship_decision(results: Path) -> dict[str, Any] | None:
    """Ship rule v2's decision over the old and the new checkpoints (`ship_rule.json`, §4),
    as the report states it: the winner, its count, and whether it is one of this study's runs
    (then it ships as `celo2`) or nothing new won (`celo2` stays); None before it exists."""
    path = results / ship_rule.DECISION
    if not path.is_file():
        return None
    decision = common.load_json(path)
    winner = decision["winner"]
    new = winner in ship_rule.new_candidates(results)
    row = decision["candidates"][winner]
    return {
        "winner": winner,
        "new": new,
        "at_or_below": row["at_or_below"],
        "cells": decision["cells"],
        "geomean_ratio": row["geomean_ratio"],
        "statement": f"{winner} ships as celo2"
        if new
        else f"nothing new won: {winner} wins again and celo2 stays",
    }


def summarise(results: Path = RESULTS) -> dict[str, Any]:
    cells = {cell_key(t, h): cell_rows(results, t, h) for t, h in fresh.held_out_cells()}
    missing = [
        f"{arm} on {key}"
        for key, c in cells.items()
        for arm in ARMS
        if c["arms"][arm]["value"] is None
    ] + [f"adamw on {key}" for key, c in cells.items() if c["adamw"] is None]
    complete = not missing
    return {
        "cells": cells,
        "h1": h1(cells, complete),
        "h2": h2(cells, complete),
        "q3": q3(cells, complete),
        "missing": missing,
        "ship": ship_decision(results),
        "producers": common.commit_counts(
            common.load_json(p) for p in sorted((results / "fresh").rglob("*@*.json"))
        ),
    }


def _ratio(r: dict[str, Any] | None, seeds: int) -> str:
    if r is None:
        return "–"
    half = "" if r["ci95"] is None else f" ± {r['ci95']:.3f}"
    partial = "" if seeds == len(settings.MAIN_SEEDS) else f" ({seeds} of 3 seeds)"
    return f"{r['mean']:.3f}×{half}{partial}"


def _ship_line(ship: dict[str, Any] | None) -> str:
    if ship is None:
        return "**Ship (main_rule.md §4):** not decided yet."
    return (
        f"**Ship (main_rule.md §4, validation only):** {ship['statement']} (at or below tuned "
        f"AdamW on {ship['at_or_below']} of {ship['cells']} headline cells, geometric-mean "
        f"ratio {ship['geomean_ratio']:.3f})."
    )


def markdown(summary: dict[str, Any]) -> str:
    one, two, three = summary["h1"], summary["h2"], summary["q3"]
    lines = [
        "<!-- generated by `python -m studies.deployed_schedule fresh-report`; do not edit -->",
        "",
        f"**H1 ({one['verdict']}):** ELO-Celo2's arm at or below tuned AdamW on "
        f"{one['at_or_below']} of {len(summary['cells'])} fresh cells ({one['needed']} needed).",
        "",
        f"**H2 ({two['verdict']}):** ELO − PES below 0 with 95% confidence on "
        f"{len(two['below_zero'])} of {len(two['long_cells'])} long cells ({two['needed']} "
        f"needed); failed seed × cell pairs: ELO {two['failures']['elo_celo2']}, PES "
        f"{two['failures']['pes_celo2']}.",
        "",
        f"**Q3 ({three['answer']}):** the deployed-schedule PES arm lower than the constant-step "
        f"arm on {len(three['lower'])} of {len(summary['cells'])} cells (yes at "
        f"{three['yes_at_least']} or more, no at {three['no_at_most']} or fewer).",
        "",
        _ship_line(summary["ship"]),
        "",
        "Per-seed test-loss ratio to tuned AdamW (mean ± 95% half-width over the three seeds):",
        "",
        "| cell | " + " | ".join(ARMS.values()) + " |",
        "|---|" + "---|" * len(ARMS),
    ]
    for key, cell in summary["cells"].items():
        ratios = [
            _ratio(cell["arms"][arm]["vs_adamw"], len(cell["arms"][arm]["per_seed"]))
            for arm in ARMS
        ]
        lines.append(f"| {key} | " + " | ".join(ratios) + " |")
    lines += ["", "Arms at or below each reference, by cell count:", ""]
    lines += ["| arm | tuned AdamW | `celo2` | published Celo2 |", "|---|---|---|---|"]
    for arm, label in ARMS.items():
        c = one["counts"][arm]
        lines.append(f"| {label} | {c['adamw']} | {c['celo2']} | {c['celo2_published']} |")
    if summary["missing"]:
        lines += ["", f"Missing: {len(summary['missing'])} arm × cell values."]
    producers = ", ".join(f"`{c}` ({n})" for c, n in summary["producers"].items()) or "none yet"
    lines += ["", f"Results produced by: {producers}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    ship_rule.require_committed_decision(args.results_dir)
    summary = summarise(args.results_dir)
    common.write_json(args.results_dir / "fresh_summary.json", summary)
    (args.results_dir / "fresh_summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
