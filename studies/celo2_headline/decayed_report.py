"""Item 4's investigation in the report: the Celo2 checkpoints with a decayed step.

`evaluate.py decayed` tunes each Celo2 main run's selected checkpoint again with the tuned
baselines' schedule shape on its own rate (`settings.DECAYED_SCHEDULE`). This module sets those
results beside the same checkpoints' protocol results (the constant schedule they were
meta-trained with) and tuned AdamW's, cell by cell, and applies `decision_rule.md`'s item 4: the
shipped Celo2 optimizer carries the decayed schedule if, for its checkpoint, the decayed
`learning_rate=1` is within DEFAULT_TOLERANCE × tuned AdamW's **validation** loss on more cells
than the constant one. Test losses are reported, never used to choose. Beside them, per Celo2
arm, H1's measure taken with each schedule (`arm_summary`: the mean over meta-seeds of the tuned
test losses, at or below tuned AdamW's on how many cells), reported only. Nothing here enters a
verdict.
"""

import math
from pathlib import Path
from typing import Any

from studies import common
from studies.celo2_headline import settings


DEFAULT_TOLERANCE = settings.DEFAULT_TOLERANCE
CONSTANT, DECAYED = "constant", "decayed"


def run_label(run: tuple[str, int]) -> str:
    """A main run (arm, seed) as `<arm>/s<seed>`: its name in the report and the shipped record."""
    return f"{run[0]}/s{run[1]}"


def run_labels() -> list[str]:
    """The Celo2 main runs as `<arm>/s<seed>`, in the order that breaks the shipping rule's
    ties (ship.py's `study_runs`)."""
    return [run_label((arm, seed)) for arm in settings.CELO2_ARMS for seed in settings.MAIN_SEEDS]


def collect(evaluation: Path, keys: list[str]) -> tuple[dict[str, dict[str, Any]], int]:
    """The decayed results under `evaluation`/decayed/<run>/best/, by `<run>|<cell>`, and how
    many were left out because they record another schedule than settings.DECAYED_SCHEDULE."""
    found, stale = {}, 0
    for run in run_labels():
        for key in keys:
            path = evaluation / "decayed" / run / "best" / f"{key}.json"
            if not path.is_file():
                continue
            data = common.load_json(path)
            if data.get("lo_schedule") != settings.DECAYED_SCHEDULE:
                stale += 1
                continue
            found[f"{run}|{key}"] = data
    return found, stale


def _validation(data: dict[str, Any], index: int) -> float:
    loss = data["sweep"][index]["validation_loss"]
    return math.inf if loss is None else float(loss)


def default_validation(data: dict[str, Any]) -> float:
    """The final validation loss (mean over evaluation seeds) at `learning_rate=1`."""
    return _validation(data, data["default_index"])


def chosen_validation(data: dict[str, Any]) -> float:
    """The final validation loss (mean over evaluation seeds) of the chosen setting."""
    return _validation(data, data["selected"])


def within(value: float, reference: float) -> bool:
    """Whether `value` is at most DEFAULT_TOLERANCE × `reference`; never when either is not
    finite (a diverged value, or an AdamW whose every setting diverged)."""
    finite = math.isfinite(value) and math.isfinite(reference)
    return finite and value <= DEFAULT_TOLERANCE * reference


def cell_entry(
    constant: dict[str, Any] | None, decayed: dict[str, Any] | None, adamw: dict[str, Any] | None
) -> dict[str, Any]:
    """One checkpoint on one cell: test losses at `learning_rate=1` and tuned, for both
    schedules, beside tuned AdamW's; and, on validation, whether each schedule's
    `learning_rate=1` is within DEFAULT_TOLERANCE × tuned AdamW (None while a result is
    missing)."""
    reference = None if adamw is None else common.nan_if_none(adamw["test_loss"])
    entry: dict[str, Any] = {"adamw": reference}
    for name, data in ((CONSTANT, constant), (DECAYED, decayed)):
        entry[name] = None
        if data is not None:
            entry[name] = {
                "default_test": common.nan_if_none(data["default_test_loss"]),
                "default_diverged": bool(data["default_diverged"]),
                "tuned_test": common.nan_if_none(data["test_loss"]),
                "multiplier": data["value"],
                "diverged": bool(data["diverged"]),
                "default_validation": default_validation(data),
            }
    complete = None not in (constant, decayed, adamw)
    reference = chosen_validation(adamw) if complete and adamw is not None else None
    entry["validation_within"] = {
        name: (
            None
            if reference is None or entry[name] is None
            else within(entry[name]["default_validation"], reference)
        )
        for name in (CONSTANT, DECAYED)
    }
    return entry


def run_summary(cells: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One checkpoint over every cell: per schedule, the cells where `learning_rate=1` is within
    the tolerance on validation, and where it is on test; the schedule the rule gives it
    (`pending` while the cells not yet judged could still change it)."""
    judged = [e for e in cells.values() if None not in e["validation_within"].values()]
    counts = {
        name: sum(bool(e["validation_within"][name]) for e in judged)
        for name in (CONSTANT, DECAYED)
    }
    test_counts = {}
    for name in (CONSTANT, DECAYED):
        present = [e for e in cells.values() if e[name] is not None and e["adamw"] is not None]
        test_counts[name] = {
            "within": sum(within(e[name]["default_test"], e["adamw"]) for e in present),
            "of": len(present),
        }
    # Decided as soon as the cells not yet judged cannot change it (the report's convention
    # for pending verdicts): decayed needs strictly more cells than constant, even if constant
    # were within on every remaining one; constant keeps ties.
    remaining = len(cells) - len(judged)
    if counts[DECAYED] > counts[CONSTANT] + remaining:
        choice = DECAYED
    elif counts[CONSTANT] >= counts[DECAYED] + remaining:
        choice = CONSTANT
    else:
        choice = "pending"
    return {
        "judged": len(judged),
        "of": len(cells),
        "validation_within": counts,
        "test_within": test_counts,
        "schedule": choice,
    }


def early_note(entry: dict[str, Any]) -> str:
    """` (decided: …)` when a run's schedule was chosen before every cell was judged."""
    left = entry["of"] - entry["judged"]
    if entry["schedule"] == "pending" or left == 0:
        return ""
    cells = "cell" if left == 1 else "cells"
    return f" (decided: the {left} {cells} not yet judged cannot change it)"


def summarise(
    evaluation: Path, results: dict[str, dict[str, Any]], keys: list[str]
) -> dict[str, Any]:
    """Item 4's investigation: per Celo2 run with any decayed result, every cell's entry and
    the run's summary. `results` are the protocol's results by path (report.collect)."""
    decayed, stale = collect(evaluation, keys)
    runs = {}
    for run in run_labels():
        if not any(f"{run}|{k}" in decayed for k in keys):
            continue
        cells = {
            k: cell_entry(
                results.get(f"runs/{run}/best/{k}.json"),
                decayed.get(f"{run}|{k}"),
                results.get(f"baselines/adamw/{k}.json"),
            )
            for k in keys
        }
        runs[run] = {"cells": cells, **run_summary(cells)}
    return {
        "schedule": dict(settings.DECAYED_SCHEDULE),
        "runs": runs,
        "arms": arm_summary(runs, keys),
        "stale": stale,
    }


def arm_summary(runs: dict[str, dict[str, Any]], keys: list[str]) -> dict[str, dict[str, Any]]:
    """Per Celo2 arm, H1's measure taken with each schedule (reported, never a verdict): on
    every cell where each of its meta-seeds has both schedules' tuned results and tuned AdamW
    has one, the mean over the seeds of the tuned test losses as a ratio to tuned AdamW's, and
    on how many such cells that mean is at or below AdamW's. `runs` is `summarise`'s."""
    arms = {}
    for arm in settings.CELO2_ARMS:
        labels = [run_label((arm, seed)) for seed in settings.MAIN_SEEDS]
        cells = {}
        for key in keys:
            entries = [runs.get(label, {}).get("cells", {}).get(key) for label in labels]
            if any(e is None or None in (e[CONSTANT], e[DECAYED], e["adamw"]) for e in entries):
                continue
            adamw = entries[0]["adamw"]
            means = {
                name: sum(e[name]["tuned_test"] for e in entries) / len(entries)
                for name in (CONSTANT, DECAYED)
            }
            cells[key] = {
                name: {"ratio_adamw": means[name] / adamw, "at_or_below": means[name] <= adamw}
                for name in (CONSTANT, DECAYED)
            }
        arms[arm] = {
            "cells": cells,
            "complete": len(cells),
            "of": len(keys),
            "at_or_below_adamw": {
                name: sum(c[name]["at_or_below"] for c in cells.values())
                for name in (CONSTANT, DECAYED)
            },
        }
    return arms


_f = common.fmt_value


def _text(entry: dict[str, Any] | None, adamw: float | None) -> str:
    """`lr=1 (× AdamW) / tuned (m=multiplier)` of one schedule on one cell."""
    if entry is None:
        return "–"
    ratio = entry["default_test"] / adamw if adamw else math.nan
    div = ", div" if entry["default_diverged"] else ""
    tuned_div = ", div" if entry["diverged"] else ""
    return (
        f"{_f(entry['default_test'])} ({_f(ratio, 2)}×{div}) / {_f(entry['tuned_test'])} "
        f"(m={entry['multiplier']:.2g}{tuned_div})"
    )


def markdown(summary: dict[str, Any]) -> list[str]:
    """The report's section on item 4's investigation, as markdown lines."""
    schedule = ", ".join(f"{k}={v:g}" for k, v in summary["schedule"].items())
    lines = [
        "Each Celo2 run's selected checkpoint with the constant step it was meta-trained with "
        "(the protocol's results) and with a warm-up + cosine decay of its own step "
        f"(`{schedule}`): test loss at learning_rate=1 (× tuned AdamW) / tuned "
        "(m: the multiplier chosen on validation). Outside every verdict; the schedule a "
        "shipped checkpoint gets is chosen on validation only (decision_rule.md, item 4).",
        "",
    ]
    stale = (
        [f"{summary['stale']} results made with another schedule were left out.", ""]
        if summary["stale"]
        else []
    )
    if not summary["runs"]:
        return lines + ["No decayed result yet.", ""] + stale
    for run, entry in summary["runs"].items():
        lines += run_block(f"**{run}**", entry)
    return lines + arm_block(summary["arms"]) + stale


def arm_block(arms: dict[str, dict[str, Any]]) -> list[str]:
    """The section's arm-level lines (`arm_summary`): each arm's count with both schedules and
    its tuned ratio to AdamW per complete cell; [] while no arm has a complete cell."""
    if not any(a["complete"] for a in arms.values()):
        return []
    counts = "; ".join(
        f"{settings.ARMS[arm].label} on {a['at_or_below_adamw'][CONSTANT]} (constant) and "
        f"{a['at_or_below_adamw'][DECAYED]} (decayed) of {a['complete']} cells complete "
        f"(of {a['of']})"
        for arm, a in arms.items()
    )
    header = ["cell"] + [
        f"{settings.ARMS[arm].label}: {name}" for arm in arms for name in (CONSTANT, DECAYED)
    ]
    rows = []
    for key in dict.fromkeys(k for a in arms.values() for k in a["cells"]):
        row = [key]
        for a in arms.values():
            cell = a["cells"].get(key)
            for name in (CONSTANT, DECAYED):
                text = "–" if cell is None else _f(cell[name]["ratio_adamw"], 3)
                row.append(text if text == "–" else f"{text}×")
        rows.append(row)
    intro = (
        "**Arm means, tuned (H1's measure with each schedule; reported, not a verdict):** the "
        f"mean over meta-seeds of the tuned test loss at or below tuned AdamW's: {counts}."
    )
    return [intro, "", *common.md_table(header, rows)]


def run_block(label: str, entry: dict[str, Any]) -> list[str]:
    """One optimizer's lines of the section (`entry`, from `run_summary` with its cells): the
    counts, the schedule the rule gives it, and both schedules per cell beside tuned AdamW."""
    counts, tests = entry["validation_within"], entry["test_within"]
    lines = [
        f"{label}: lr=1 within {DEFAULT_TOLERANCE}× tuned AdamW on validation on "
        f"{counts[CONSTANT]} (constant) and {counts[DECAYED]} (decayed) of {entry['judged']} "
        f"judged cells (of {entry['of']}); on test {tests[CONSTANT]['within']} of "
        f"{tests[CONSTANT]['of']} and {tests[DECAYED]['within']} of {tests[DECAYED]['of']}. "
        f"Schedule by the rule: {entry['schedule']}{early_note(entry)}.",
        "",
        "| cell | AdamW | constant: lr=1 / tuned | decayed: lr=1 / tuned |",
        "|---|---|---|---|",
    ]
    for key, cell in entry["cells"].items():
        if cell[CONSTANT] is None and cell[DECAYED] is None:
            continue
        adamw = cell["adamw"]
        lines.append(
            f"| {key} | {_f(adamw)} | {_text(cell[CONSTANT], adamw)} | "
            f"{_text(cell[DECAYED], adamw)} |"
        )
    return lines + [""]
