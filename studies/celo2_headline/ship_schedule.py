"""The schedule a shipped Celo2 optimizer carries (`decision_rule.md`, item 4), for its record.

The rule's item 4 chooses, on validation data only, between the constant step the checkpoint
was meta-trained with and a warm-up + cosine decay of its own step
(`settings.DECAYED_SCHEDULE`): the report's `decayed` section (`decayed_report.py`) holds the
counts. This module reads that choice for the shipped run, writes the weights with the chosen
schedule's hyperparameters, and says in words what was chosen and what the chosen schedule's
test figures are (reported, never choosing).
"""

import shutil
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.celo2_headline import report, settings
from studies.celo2_headline.decayed_report import run_label


def schedule_choice(summary: dict[str, Any] | None, run: tuple[str, int]) -> dict[str, Any]:
    """Item 4 of the rule for `run`'s checkpoint, from the report's `decayed` section: the
    schedule it ships with (`constant`, `decayed` or `pending`) and the validation counts that
    chose it. Pending also when the report was made with another schedule than
    `settings.DECAYED_SCHEDULE` (rerun the report)."""
    section = (summary or {}).get("decayed") or {}
    entry = section.get("runs", {}).get(run_label(run))
    of = len(report.keys())
    if entry is None:
        return {"choice": "pending", "judged": 0, "of": of}
    if section.get("schedule") != settings.DECAYED_SCHEDULE:
        return {"choice": "pending", "judged": 0, "of": of, "note": "report of another schedule"}
    return {
        "choice": entry["schedule"],
        "judged": entry["judged"],
        "of": entry["of"],
        "validation_within": entry["validation_within"],
    }


def shipped_schedule(summary: dict[str, Any] | None, run: tuple[str, int]) -> dict[str, Any]:
    """The test-time schedule the shipped optimizer carries (decision_rule.md, item 4): the
    decayed one (`settings.DECAYED_SCHEDULE`) where the rule chose it, else the constant one it
    was meta-trained with (also while the choice is pending, in a partial ship: `chosen_by`
    says so). Beside it, reported and never used to choose: the cells where each schedule's
    `learning_rate=1` is within the tolerance of tuned AdamW's **test** loss, and the decayed
    schedule's row per cell (`evaluation` holds the constant schedule's)."""
    choice = schedule_choice(summary, run)
    decayed = choice["choice"] == "decayed"
    entry = ((summary or {}).get("decayed") or {}).get("runs", {}).get(run_label(run)) or {}
    return {
        "name": "decayed" if decayed else "constant",
        "hyperparameters": dict(settings.DECAYED_SCHEDULE) if decayed else {},
        "chosen_by": choice,
        "reported_test_within": entry.get("test_within"),
        "decayed_evaluation": entry.get("cells"),
    }


def _setting(value: Any) -> str:
    """A schedule setting as the summary writes it: numbers in `g` format, flags as words."""
    return str(value) if isinstance(value, bool) or value is None else f"{value:g}"


def schedule_sentence(schedule: dict[str, Any]) -> str:
    """What the summary says of the shipped schedule and of which schedule its figures are."""
    choice = schedule["chosen_by"]
    if schedule["name"] == "decayed":
        counts = choice["validation_within"]
        return (
            "It ships with a warm-up + cosine decay of its own step "
            f"({', '.join(f'{k}={_setting(v)}' for k, v in schedule['hyperparameters'].items())}), "
            "chosen by the rule's item 4 on validation data (learning_rate=1 within "
            f"{settings.DEFAULT_TOLERANCE}× tuned AdamW's validation loss on {counts['decayed']} "
            f"cells against {counts['constant']} for the constant step; {choice['judged']} of "
            f"{choice['of']} cells judged); the evaluation figures "
            "above are of the constant step it was meta-trained with, the decayed one's are in "
            f"`schedule.decayed_evaluation`.{decayed_test_sentence(schedule)}"
        )
    if choice["choice"] == "pending":
        return (
            "It ships with the constant step it was meta-trained with; item 4's choice of "
            f"schedule is pending (judged on {choice['judged']} of {choice['of']} cells)."
        )
    counts = choice["validation_within"]
    return (
        "It ships with the constant step it was meta-trained with, which item 4's rule kept on "
        f"validation data (learning_rate=1 within {settings.DEFAULT_TOLERANCE}× tuned AdamW's "
        f"validation loss on {counts['constant']} cells against {counts['decayed']} for the "
        f"decayed step; {choice['judged']} of {choice['of']} cells judged)."
    )


def decayed_test_sentence(schedule: dict[str, Any]) -> str:
    """What the shipped (decayed) schedule's own results say on test data, reported and never
    choosing: tuned, the cells at or below tuned AdamW; at `learning_rate=1`, those within the
    tolerance of it. Empty when there are no such results."""
    cells = (schedule.get("decayed_evaluation") or {}).values()
    rows = [
        c for c in cells if c.get("adamw") is not None and "tuned_test" in (c.get("decayed") or {})
    ]
    within = (schedule.get("reported_test_within") or {}).get("decayed")
    if not rows or within is None:
        return ""
    wins = sum(common.at_or_below(c["decayed"]["tuned_test"], c["adamw"]) for c in rows)
    return (
        f" With the decayed step, on test data (reported, choosing nothing): tuned, at or below "
        f"tuned AdamW on {wins} of {len(rows)} evaluated cells; at learning_rate=1, within "
        f"{settings.DEFAULT_TOLERANCE}× of it on {within['within']} of {within['of']}."
    )


def write_optimizer(source: Path, target: Path, schedule: dict[str, Any]) -> None:
    """The selected checkpoint `source` written to `target`: copied as it is, or with the
    shipped schedule's hyperparameters when it has any."""
    if not schedule["hyperparameters"]:
        shutil.copyfile(source, target)
        return
    lo = elo.load_optimizer(source)
    if not isinstance(lo, elo.Celo2):
        raise SystemExit(f"{source} holds a {type(lo).__name__}, not the Celo2 the rule ships.")
    elo.save_optimizer(target, lo.with_hyperparameters(**schedule["hyperparameters"]))
