"""Item 1 in the report: does PES fail at horizons far beyond its training?

`evaluate.py horizon` tunes AdamW and the small_fc study's validation-selected PES and ELO
checkpoints (seeds 0-4) as in the protocol at settings.LONG_HORIZON steps on each of
settings.LONG_HORIZON_TASKS, into `horizon/<name>/<task>@30000.json` (`<name>`: `adamw`,
`pes_s<seed>`, `elo_s<seed>`). This module applies `decision_rule.md`'s item 1 to them, task by
task:

- a checkpoint *diverges* where its chosen value's result says so (the protocol's flag);
- it *rises late* where its chosen value's test loss at the last step (the mean over evaluation
  seeds, the result's `test_loss_curve`) is more than LATE_RISE above the lowest point of that
  same curve (measured every 3K steps): the late-stage failure ELO's buffer targets;
- PES *fails at the long horizon* on a task if at least one of its five checkpoints diverges,
  or at least RISES_TO_FAIL of them rise late.

If PES fails on a task, that task is added to the main evaluation at 30K steps (if on both, the
one with more failing checkpoints; a tie goes to TIE_BREAK, the smaller network); the added cell
is reported beside the verdicts and changes neither H1 nor H2. Otherwise 30K stays out and the
report says what item 1 found, per checkpoint, for ELO as for PES. A task's verdict is pending
while one of PES's results is missing, unless those present already settle it.
"""

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.celo2_headline import settings


LATE_RISE = 0.05
RISES_TO_FAIL = 3
TIE_BREAK = "mlp-w64-d2_cifar10-8x8x3"
FAILED, HELD, PENDING = "fails", "does not fail", "pending"


def result_name(arm: str, seed: int) -> str:
    """A checkpoint's directory under `horizon/`: `<arm>_s<seed>`."""
    return f"{arm}_s{seed}"


def curve_rise(curve: Sequence[float | None]) -> dict[str, Any]:
    """How far a test-loss curve's last point lies above its lowest point, as a fraction of the
    lowest (`rise`), with the lowest and last points and the lowest one's index; `rise` is inf
    when the last point is not finite (a run that ended diverged rose), nan when no point is."""
    values = np.asarray([common.nan_if_none(v) for v in curve], np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return {"rise": math.nan, "lowest": math.nan, "lowest_index": None, "last": math.nan}
    lowest_index = int(np.flatnonzero(finite)[np.argmin(values[finite])])
    lowest = float(values[lowest_index])
    last = float(values[-1])
    if not math.isfinite(last):
        rise = math.inf
    elif lowest <= 0.0:  # a loss of 0 (or below) has no relative rise: any rise is infinite
        rise = 0.0 if last == lowest else math.inf
    else:
        rise = last / lowest - 1.0
    return {"rise": rise, "lowest": lowest, "lowest_index": lowest_index, "last": last}


def rises_late(shape: dict[str, Any]) -> bool:
    """Whether a curve's last point is more than LATE_RISE above its lowest (`curve_rise`),
    compared as losses so that a rise of exactly LATE_RISE does not count; a non-finite last
    point rose, a curve with no finite point did not (it is unknown)."""
    if math.isnan(shape["lowest"]):
        return False
    if not math.isfinite(shape["last"]):
        return True
    return shape["last"] > (1.0 + LATE_RISE) * shape["lowest"]


def checkpoint_entry(data: dict[str, Any], adamw: dict[str, Any] | None) -> dict[str, Any]:
    """One tuned optimizer at 30K steps: its chosen value (and `grid_end`, "lowest" or "highest"
    where it is an end of the sweep), its test loss, the ratio to tuned AdamW's, whether it
    diverged, its chosen value's late rise and its test-loss curve (`figures.py` draws it)."""
    shape = curve_rise(data["test_loss_curve"])
    steps = data["steps"]
    test = common.nan_if_none(data["test_loss"])
    reference = math.nan if adamw is None else common.nan_if_none(adamw["test_loss"])
    ratio = test / reference if math.isfinite(reference) and reference > 0 else math.nan
    last = len(data["sweep"]) - 1
    return {
        "value": data["value"],
        "grid_end": {0: "lowest", last: "highest"}.get(data["selected"]),
        "test_loss": test,
        "ratio_to_adamw": ratio,
        "diverged": bool(data["diverged"]),
        "late_rise": shape["rise"],
        "lowest_step": None if shape["lowest_index"] is None else steps[shape["lowest_index"]],
        "rises_late": rises_late(shape),
        "curve": {"steps": steps, "test_loss": data["test_loss_curve"]},
    }


def fails(entry: dict[str, Any]) -> bool:
    """Whether a checkpoint fails at the long horizon: it diverged or rose late."""
    return entry["diverged"] or entry["rises_late"]


def arm_summary(entries: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One arm on one task: counts over its checkpoints, the ratio to tuned AdamW as mean and
    95% t-interval over the seeds present, and the mean late rise (nan or inf where one is)."""
    ratios = np.asarray([e["ratio_to_adamw"] for e in entries.values()], np.float64)
    mean, half = common.t_interval(ratios) if len(ratios) else (math.nan, math.nan)
    rises = [e["late_rise"] for e in entries.values()]
    return {
        "present": len(entries),
        "diverged": sum(e["diverged"] for e in entries.values()),
        "rise_late": sum(e["rises_late"] for e in entries.values()),
        "failing": sum(fails(e) for e in entries.values()),
        "ratio_to_adamw": {"mean": mean, "ci95": half},
        "late_rise_mean": float(np.mean(rises)) if rises else math.nan,
    }


def task_verdict(pes: dict[str, Any]) -> str:
    """Item 1's rule on one task from PES's arm summary: FAILED, HELD or PENDING."""
    if pes["diverged"] >= 1 or pes["rise_late"] >= RISES_TO_FAIL:
        return FAILED
    if pes["present"] == len(settings.LONG_HORIZON_SEEDS):
        return HELD
    return PENDING


def added_cell(tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The task item 1 adds to the main evaluation at 30K steps: `task` (None when 30K stays
    out) and `decided` (False while a pending task, or a missing result of a task that failed
    beside another, could still change it)."""
    verdicts = {t: entry["pes_verdict"] for t, entry in tasks.items()}
    if PENDING in verdicts.values():
        return {"task": None, "decided": False}
    failed = [t for t, v in verdicts.items() if v == FAILED]
    if not failed:
        return {"task": None, "decided": True}
    complete = len(settings.LONG_HORIZON_SEEDS)
    if len(failed) > 1 and any(tasks[t]["arms"]["pes"]["present"] < complete for t in failed):
        # A task can fail early (one divergence); while its other results are missing its
        # count of failing checkpoints, which picks the task, can still grow.
        return {"task": None, "decided": False}
    most = max(tasks[t]["arms"]["pes"]["failing"] for t in failed)
    tied = [t for t in failed if tasks[t]["arms"]["pes"]["failing"] == most]
    task = TIE_BREAK if TIE_BREAK in tied else tied[0]
    return {"task": task, "decided": True}


def summarise(evaluation: Path) -> dict[str, Any]:
    """Item 1 from the results under `evaluation`/horizon: per task, AdamW's result, every
    checkpoint's entry, each arm's summary and PES's verdict; and the cell it adds."""
    tasks = {}
    for task in settings.LONG_HORIZON_TASKS:
        cell = f"{task}@{settings.LONG_HORIZON}.json"
        adamw_path = evaluation / "horizon" / "adamw" / cell
        adamw = common.load_json(adamw_path) if adamw_path.is_file() else None
        arms, checkpoints = {}, {}
        for arm in settings.LONG_HORIZON_ARMS:
            entries = {}
            for seed in settings.LONG_HORIZON_SEEDS:
                path = evaluation / "horizon" / result_name(arm, seed) / cell
                if path.is_file():
                    entries[seed] = checkpoint_entry(common.load_json(path), adamw)
                    checkpoints[result_name(arm, seed)] = entries[seed]
            arms[arm] = arm_summary(entries)
        tasks[task] = {
            "adamw": None if adamw is None else checkpoint_entry(adamw, adamw),
            "checkpoints": checkpoints,
            "arms": arms,
            "pes_verdict": task_verdict(arms["pes"]),
        }
    return {
        "horizon": settings.LONG_HORIZON,
        "late_rise": LATE_RISE,
        "rises_to_fail": RISES_TO_FAIL,
        "tasks": tasks,
        "added_cell": added_cell(tasks),
    }


def _percent(x: float) -> str:
    return "—" if math.isnan(x) else ("∞" if math.isinf(x) else f"{100 * x:+.1f}%")


def _row(name: str, e: dict[str, Any]) -> list[str]:
    return [
        name,
        f"{e['value']:.3g}" + ("" if e["grid_end"] is None else f" ({e['grid_end']})"),
        common.fmt_value(e["test_loss"]),
        common.fmt_value(e["ratio_to_adamw"]),
        f"{_percent(e['late_rise'])} (low at {e['lowest_step']})",
        "yes" if e["diverged"] else "no",
    ]


def markdown(item1: dict[str, Any]) -> list[str]:
    """Item 1's section of the report: a table per task, the verdicts and the added cell."""
    lines = [
        f"The small_fc study's selected checkpoints and tuned AdamW at {item1['horizon']:,} "
        f"steps. Late rise: the chosen value's test loss at the last step above the lowest "
        f"point of its curve (every 3K steps); PES fails on a task if one of its five "
        f"checkpoints diverges or at least {item1['rises_to_fail']} rise more than "
        f"{100 * item1['late_rise']:.0f}%. Value: the tuned `learning_rate` multiplier (AdamW's "
        "peak learning rate); (lowest)/(highest): at an end of its 7-value grid, where the best "
        "setting may lie beyond it.",
        "",
    ]
    header = ["checkpoint", "value", "test loss", "× AdamW", "late rise", "diverged"]
    for task, entry in item1["tasks"].items():
        rows = [_row(name, e) for name, e in entry["checkpoints"].items()]
        if entry["adamw"] is not None:
            rows.append(_row("tuned AdamW", entry["adamw"]))
        lines += [f"**{task}**", "", *common.md_table(header, rows)]
        for arm, s in entry["arms"].items():
            ratio = s["ratio_to_adamw"]
            lines.append(
                f"- {arm.upper()}: {s['present']} of {len(settings.LONG_HORIZON_SEEDS)} "
                f"checkpoints; × AdamW {common.fmt_value(ratio['mean'])} ± "
                f"{common.fmt_value(ratio['ci95'])}; {s['diverged']} diverged, "
                f"{s['rise_late']} rose late; mean late rise {_percent(s['late_rise_mean'])}"
            )
        lines += ["", f"PES at the long horizon on this task: **{entry['pes_verdict']}**.", ""]
    added = item1["added_cell"]
    if not added["decided"]:
        outcome = "pending (a task's verdict is)"
    elif added["task"] is None:
        outcome = "none: 30K stays out of the main evaluation"
    else:
        outcome = f"`{added['task']}@{item1['horizon']}`, reported beside the verdicts"
    return [*lines, f"Cell added to the main evaluation: {outcome}.", ""]
