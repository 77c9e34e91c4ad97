"""How a shipped main run was trained, for its record: command, commits, segments, budget.

`ship.py` records beside the weights the `elo meta-train` command that made them (as the run
recorded it, each setting's source named), the commits and machines of the segments that
trained the shipped checkpoint (from `segments.json`, which `study.py` writes), any steps the
segments leave unaccounted for, and the meta-training budget in outer and inner steps.
"""

import shlex
from pathlib import Path
from typing import Any

from studies.celo2_headline import report, settings, study


HERE = Path(__file__).parent


def _current_settings(arm: str) -> dict[str, Any]:
    """The command's settings as settings.py has them now."""
    return {
        "preset": settings.ARMS[arm].preset,
        "checkpoint_every": settings.CHECKPOINT_EVERY,
        "check_every": settings.CHECK_EVERY,
        "validate_steps": settings.VALIDATE_STEPS,
        "selection_tasks": list(settings.SELECTION_TASKS),
    }


def recorded_settings(study_settings: dict[str, Any] | None, meta: dict[str, Any]):
    """The settings of a main run's command beyond its `meta.json` config and overrides, and
    where each was read: the run's `meta.json` if it records it, else RESULTS/settings.json
    (`study_settings`: written with the study's first run; `study.check_settings` makes every
    later run match it), else the current settings.py."""
    recorded = dict((study_settings or {}).get("settings", {}))
    arm = recorded.get("arms", {}).get(meta["arm"], {})
    if "preset" in arm:
        recorded["preset"] = arm["preset"]
    layers = (("meta.json", meta), ("settings.json", recorded))
    values, sources = {}, {}
    for key, current in _current_settings(meta["arm"]).items():
        found = [(name, layer[key]) for name, layer in layers if key in layer]
        sources[key], values[key] = found[0] if found else ("settings.py", current)
    return values, sources


def command(meta: dict[str, Any], values: dict[str, Any]) -> str:
    """The `elo meta-train` command of a main run (in the study's default runs directory):
    `study.py`'s, with the outer steps, seed and overrides the run recorded (`meta.json`) and
    the other settings from `recorded_settings`."""
    root = HERE.resolve().parents[1]
    out = (HERE.resolve() / "runs").relative_to(root) / meta["name"]
    steps = meta["config"].get("num_outer_steps", meta["overrides"].get("num_outer_steps"))
    fields = meta["overrides"] | {"num_outer_steps": steps}
    argv = study.meta_train_argv(meta["arm"], meta["seed"], out, fields, pilot=False)
    flags = {
        "--preset": values["preset"],
        "--checkpoint-every": values["checkpoint_every"],
        "--validate-every": values["check_every"],
        "--validate-steps": values["validate_steps"],
        "--validate-task": ",".join(values["selection_tasks"]),
    }
    for flag, value in flags.items():
        argv[argv.index(flag) + 1] = str(value)
    return shlex.join(["elo", *argv])


def command_note(sources: dict[str, str]) -> str | None:
    """What the command took from the current settings.py, not from a record; None if nothing."""
    guessed = [key for key, source in sources.items() if source == "settings.py"]
    if not guessed:
        return None
    return (
        f"{', '.join(guessed)}: recorded neither in the run's meta.json nor in "
        "RESULTS/settings.json; taken from the current settings.py"
    )


def environment(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment's machine and software, its commit the code's (`segment_commit`)."""
    return segment["environment"] | {"commit": report.segment_commit(segment)}


def training_segments(segments: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
    """The segments that made the checkpoint of outer step `step`: those that started before it
    (the first segment alone for step 0, the initial optimizer)."""
    return [s for s in segments if s["from_step"] < max(step, 1)]


def segment_gaps(segments: list[dict[str, Any]], outer_steps: int) -> list[str]:
    """The outer steps `segments` leaves unaccounted for, in words: [] when they begin at step
    0, each begins at or before the previous one's end, and the last ends at `outer_steps`."""
    gaps, reached = [], 0
    for segment in segments:
        if segment["from_step"] > reached:
            gaps.append(f"steps {reached}–{segment['from_step']}")
        reached = segment["to_step"]
    if reached < outer_steps:
        gaps.append(f"steps {reached}–{outer_steps}")
    elif reached > outer_steps:
        gaps.append(f"the last segment ends at step {reached}, the run has {outer_steps}")
    return gaps


def covered_steps(segments: list[dict[str, Any]]) -> str:
    """The outer steps the segments span, as `a–b` ranges (overlaps merged)."""
    spans: list[list[int]] = []
    for segment in sorted(segments, key=lambda s: s["from_step"]):
        if spans and segment["from_step"] <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], segment["to_step"])
        else:
            spans.append([segment["from_step"], segment["to_step"]])
    return " and ".join(f"{a}–{b}" for a, b in spans) or "none"


def budget(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's meta-training budget, in outer and inner steps.

    Each outer step runs, for each of `config["tasks"]`, `config["num_particles"]` perturbation
    directions, each as a + and a − inner problem, for `config["truncation_length"]` inner steps:
    `inner_steps = outer_steps × len(tasks) × num_particles × 2 × truncation_length` (the
    README's 3 × 16 × 50 × 10⁴ = 2.4 × 10⁷ for a full run). `outer_steps` is the run's recorded
    count (`meta.json`); the selected checkpoint had seen `checkpoint_step` of them. The
    selection checks' inner steps (validation only, never meta-trained on) are not counted.
    """
    config = meta["config"]
    per_outer = len(config["tasks"]) * config["num_particles"] * 2 * config["truncation_length"]
    return {
        "outer_steps": meta["outer_steps"],
        "inner_steps": meta["outer_steps"] * per_outer,
        "inner_steps_per_outer_step": per_outer,
        "checkpoint_outer_steps": meta["best_validation_step"],
        "checkpoint_inner_steps": meta["best_validation_step"] * per_outer,
        "seconds_meta_steps": meta["seconds_meta_steps"],
    }


def segments_record(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each segment as the record lists it: its steps, time, exit code, commit and machine."""
    return [
        {k: s.get(k) for k in ("from_step", "to_step", "seconds", "exit_code")}
        | {"commit": report.segment_commit(s), "environment": s["environment"]}
        for s in segments
    ]
