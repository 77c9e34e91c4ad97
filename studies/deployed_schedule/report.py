"""The deployed-schedule study's report, from its committed results only: where every run
stands, the pilot's checks and choices (rule.md §3-4), and the main runs' checks with ELO's
learned-optimizer-alone phase beside PES (issue 44).

    python -m studies.deployed_schedule report    # writes results/summary.json and summary.md

A run counts as finished when its `meta.json` is in the results; an unfinished run is reported
with the outer steps its `segments.json` records, and no check of it is read before it ends.
"""

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from studies import common
from studies.deployed_schedule import main_runs, pilot, settings
from studies.harness.provenance import commit_counts
from studies.harness.stats import t_interval


RESULTS = pilot.HERE / "results"
NOT_STARTED = "not started"


def progress(results: Path, name: str, total: int) -> str:
    """Where one run stands: `finished`, `at outer step N of T` (the end of its last recorded
    segment: a session killed hard records none) or `not started` (no segment recorded)."""
    if (results / name / "meta.json").is_file():
        return "finished"
    segments = results / name / "segments.json"
    if not segments.is_file():
        return NOT_STARTED
    done = max((s["to_step"] for s in common.load_json(segments)), default=0)
    return f"at outer step {done} of {total}"


def producers(results: Path, name: str) -> dict[str, int]:
    """The commits that ran a run's recorded segments, with the outer steps of each (a step
    re-run after a failed segment counts again; a hard-killed session is not recorded)."""
    segments = results / name / "segments.json"
    if not segments.is_file():
        return {}
    steps: dict[str, int] = {}
    for s in common.load_json(segments):
        commit = s["environment"]["commit"]
        steps[commit] = steps.get(commit, 0) + s["to_step"] - s["from_step"]
    return steps


def stage_rows(results: Path, names: dict[Any, str], prefix: str) -> list[dict[str, Any]]:
    """One row per run of a pilot stage: its value, state, checks and score (finished runs)."""
    rows = []
    for value, name in names.items():
        checks = pilot.checks(results, name)
        scored = checks is not None and all(k in checks for k in settings.PILOT_SCORE_STEPS)
        rows.append(
            {
                "run": name,
                "value": value,
                "state": progress(results, f"{prefix}/{name}", settings.PILOT_STEPS),
                "checks": None if checks is None else {str(k): x for k, x in checks.items()},
                "score": pilot.score(checks) if scored else None,
                "commits": producers(results, f"{prefix}/{name}"),
                "step0_environment": pilot.step0_environment_record(results, name),
            }
        )
    return rows


def pilot_section(results: Path) -> dict[str, Any]:
    """Stage 1's rows, stage 2's once stage 1 has chosen, and the decision so far; `stopped`
    says why the pilot stopped when its step-0 checks differ (rule.md §3), else None."""
    rates = {lr: pilot.rate_run(lr) for lr in settings.PILOT_LEARNING_RATES}
    section: dict[str, Any] = {
        "stage1": stage_rows(results, rates, "pilot"),
        "stage2": None,
        "decision": {"rate": None, "resume": None},
        "stopped": None,
        "measured_step0": [[*e, v] for e, v in pilot.measured_step0(results).items()],
    }
    try:
        decision = pilot.decide(results)
    except SystemExit as stop:
        section["stopped"] = str(stop)
        return section
    section["decision"] = decision
    if decision["rate"] is not None:
        lr = decision["rate"]["chosen"]
        probabilities = {p: pilot.resume_run(lr, p) for p in settings.RESUME_PROBABILITIES}
        section["stage2"] = stage_rows(results, probabilities, "pilot")
    return section


def curve(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per check step: the mean score over the finished seeds with its 95% t half-width."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for check in run["checks"]:
            by_step.setdefault(check["step"], []).append(check["score"])
    out = {}
    for step, scores in sorted(by_step.items()):
        mean, half = t_interval(np.asarray(scores))
        out[str(step)] = {"mean": mean, "ci95": None if np.isnan(half) else half, "n": len(scores)}
    return out


def main_section(results: Path, decided: dict[str, Any]) -> dict[str, Any] | None:
    """The main runs, once the pilot has decided: each run's state, the finished runs' checks,
    selected step and (ELO) phases, and each method's mean curve over its finished seeds.
    `decided` is the pilot's decision as its results give it now (`pilot_section`); the
    committed decision file must agree with it."""
    decision_path = results / pilot.DECISION
    if not decision_path.is_file():
        return None
    decision = common.load_json(decision_path)
    for stage in ("rate", "resume"):
        if decided[stage] is None or decided[stage]["chosen"] != decision[stage]["chosen"]:
            raise SystemExit(
                f"{decision_path} chose another {stage} than the pilot's results give now: "
                "the results or the decision changed after the pilot decided."
            )
    section: dict[str, Any] = {"runs": {}, "curves": {}}
    finished: dict[str, list[dict[str, Any]]] = {m: [] for m in settings.METHODS}
    for name, seed, _ in main_runs.main_runs(decision):
        method = name.split("/")[1]
        meta_path = results / name / "meta.json"
        meta = common.load_json(meta_path) if meta_path.is_file() else None
        section["runs"][name] = {
            "method": method,
            "seed": seed,
            "state": progress(results, name, settings.MAIN_STEPS),
            "commits": producers(results, name),
            **(
                {}
                if meta is None
                else {
                    "checks": meta["checks"],
                    "best_validation_step": meta["best_validation_step"],
                    "best_validation_score": meta["best_validation_score"],
                    "phases": meta["phases"],
                }
            ),
        }
        if meta is not None:
            finished[method].append(meta)
    section["curves"] = {m: curve(runs) for m, runs in finished.items() if runs}
    return section


def summarise(results: Path = RESULTS) -> dict[str, Any]:
    """The report as data (see the module)."""
    warm = common.load_json(results / "warm_start.json")
    segments = [
        {"environment": s["environment"]}
        for path in sorted(results.glob("**/segments.json"))
        for s in common.load_json(path)
    ]
    pilot_part = pilot_section(results)
    return {
        "warm_start": warm["winner"],
        "pilot": pilot_part,
        "main": main_section(results, pilot_part["decision"]),
        "segments_by_commit": commit_counts(segments),
    }


def margin_text(
    stage: dict[str, Any], stages: list[dict[str, Any]], measured: list[list[Any]]
) -> str:
    """`stage`'s chosen value's margin over the next score, beside how far the warm start's
    check moves across environments: the step-0 checks of every decided stage's runs
    (`stages`, both stages once stage 2 has decided) and the `step0-check` measurements
    (`measured`: [cpu, devices, score] each), the same weights (rule.md, amendment of
    2026-12-02, (c): every environment that measured it). A margin below that is within the
    environments' float rounding."""
    scores = sorted(stage["scores"].values())
    if len(scores) < 2:
        return ""
    gap = (scores[1] - scores[0]) / scores[0]
    step0 = [v for s in stages for v in s["step0"].values()] + [m[2] for m in measured]
    environments = {tuple(e) for s in stages for e in s.get("step0_environment", {}).values() if e}
    environments |= {(m[0], m[1]) for m in measured}
    spread = (max(step0) - min(step0)) / min(step0)
    within = " (within it)" if gap <= spread else ""
    return (
        f" The chosen value's score is {gap:.1e} (relative) below the next{within}; the warm "
        f"start's check moves by {spread:.1e} across the {len(environments)} environment"
        f"{'s' * (len(environments) != 1)} that measured it."
    )


def selected_phase(step: int, phases: dict[str, Any] | None) -> str:
    """Which phase of meta-training a selected checkpoint comes from (main_rule.md §1): the warm
    start at step 0; for ELO (`phases` from `main_runs.phases`), imitation of the expert, the
    ramp, or the learned optimizer alone; for PES, which has no phases, "PES"."""
    if step == 0:
        return "the warm start"
    if phases is None:
        return "PES"
    # The check at step s follows the updates of outer steps 0..s-1, and `imitation_until` is
    # the last outer step of full supervision (`elo.SupervisionSchedule.start`): the phase is
    # the last update's. "alone" from `alone_from` on, as main_rule.md registers it (the update
    # before that check is the ramp's last, at alpha = 1 - 1/ramp length).
    if step - 1 <= phases["imitation_until"]:
        return "imitation"
    return "ramp" if step < phases["alone_from"] else "alone"


def _environment(row: dict[str, Any]) -> str:
    environment = row.get("step0_environment")
    if not environment:
        return "–"
    cpu, devices = environment
    return f"{cpu}, {devices} device{'s' * (devices != 1)}"


def _score(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def _stage_table(rows: list[dict[str, Any]], value_name: str, chosen: Any) -> list[str]:
    steps = [str(s) for s in range(0, settings.PILOT_STEPS + 1, settings.PILOT_CHECK_EVERY)]
    lines = [
        f"| {value_name} | state | "
        + " | ".join(f"check {s}" for s in steps)
        + " | score | step 0 made on |",
        "|---|---|" + "---|" * (len(steps) + 2),
    ]
    for row in rows:
        checks = row["checks"] or {}
        mark = " **(chosen)**" if row["value"] == chosen else ""
        cells = [_score(checks.get(s)) for s in steps]
        lines.append(
            f"| {row['value']:g}{mark} | {row['state']} | "
            + " | ".join(cells)
            + f" | {_score(row['score'])} | {_environment(row)} |"
        )
    return lines


def _curve_text(point: dict[str, Any] | None) -> str:
    if point is None:
        return "–"
    half = "" if point["ci95"] is None else f" ± {point['ci95']:.4f}"
    return f"{point['mean']:.4f}{half} (n={point['n']})"


def markdown(summary: dict[str, Any]) -> str:
    """The report as the Markdown the docs page includes."""
    pilot_part = summary["pilot"]
    decision = pilot_part["decision"]
    lines = [
        "<!-- generated by `python -m studies.deployed_schedule report`; do not edit -->",
        "",
        f"**Warm start** (rule.md §2, chosen on validation): `{summary['warm_start']}`.",
        "",
        "### The pilot, stage 1: the meta learning rate (PES-Celo2)",
        "",
        "A check is the mean normalised validation loss of the learned optimizer alone on the "
        f"three selection tasks, {settings.VALIDATE_STEPS:,} steps with its deployed schedule "
        "(lower is better); a run's score is the mean of its checks at "
        + " and ".join(str(s) for s in settings.PILOT_SCORE_STEPS)
        + " (rule.md §3).",
        "",
    ]
    chosen_rate = None if decision["rate"] is None else decision["rate"]["chosen"]
    # Every decided stage's step-0 checks measure the same warm start (rule.md, amendment (c)).
    decided = [d for d in (decision["rate"], decision["resume"]) if d is not None]
    lines += _stage_table(pilot_part["stage1"], "meta learning rate", chosen_rate)
    lines.append("")
    if pilot_part["stopped"] is not None:
        lines.append(f"**The pilot stopped:** {pilot_part['stopped']}")
    elif decision["rate"] is None:
        lines.append("Stage 1 has not decided: every rate's run must finish first.")
    else:
        rate = decision["rate"]
        improving = "still improving" if rate["chosen_still_improving"] else "not improving"
        below = len(rate["below_warm_start"])
        lines.append(
            f"Stage 1 chose {chosen_rate:g}: {improving} at its end (check at "
            f"{settings.PILOT_SCORE_STEPS[-1]} against {settings.PILOT_SCORE_STEPS[-2]}); "
            f"{below} of {len(rate['scores'])} rates score below their own step-0 check."
            + margin_text(rate, decided, pilot_part["measured_step0"])
        )
    lines += ["", "### The pilot, stage 2: ELO's resume probability (ELO-Celo2, Muon expert)", ""]
    if pilot_part["stage2"] is None:
        lines.append("Runs once stage 1 has chosen the rate.")
    else:
        chosen_p = None if decision["resume"] is None else decision["resume"]["chosen"]
        lines += _stage_table(pilot_part["stage2"], "resume probability", chosen_p)
        if decision["resume"] is not None:
            margin = margin_text(decision["resume"], decided, pilot_part["measured_step0"])
            lines += ["", f"Stage 2 chose {chosen_p:g}." + margin]
    lines += ["", "### The main runs", ""]
    main_part = summary["main"]
    if main_part is None:
        lines.append(
            "They start once the pilot has decided and `main_rule.md` is committed "
            f"(PES-Celo2 and ELO-Celo2, seeds {', '.join(map(str, settings.MAIN_SEEDS))}, "
            f"{settings.MAIN_STEPS:,} outer steps each)."
        )
    else:
        lines += [
            "| run | state | selected at step | its phase | its check |",
            "|---|---|---|---|---|",
        ]
        for name, run in main_part["runs"].items():
            step = run.get("best_validation_step")
            phase = "–" if step is None else selected_phase(step, run["phases"])
            lines.append(
                f"| {name} | {run['state']} | {'–' if step is None else step} | {phase} | "
                f"{_score(run.get('best_validation_score'))} |"
            )
        if main_part["curves"]:
            steps = sorted({int(s) for c in main_part["curves"].values() for s in c})
            methods = list(main_part["curves"])
            lines += [
                "",
                "Checks by outer step, mean over the finished seeds with a 95% interval "
                "(ELO imitates the expert to "
                f"{settings.ELO_SUPERVISION[0]:.0%} of the run and its learned optimizer trains "
                f"alone from {settings.ELO_SUPERVISION[1]:.0%} on, rule.md §1):",
                "",
                "| outer step | " + " | ".join(settings.METHODS[m] for m in methods) + " |",
                "|---|" + "---|" * len(methods),
            ]
            for step in steps:
                cells = [_curve_text(main_part["curves"][m].get(str(step))) for m in methods]
                lines.append(f"| {step} | " + " | ".join(cells) + " |")
    commits = ", ".join(f"`{c}` ({n})" for c, n in summary["segments_by_commit"].items())
    lines += ["", f"Segments of training by the commit that ran them: {commits or 'none yet'}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    summary = summarise(args.results_dir)
    common.write_json(args.results_dir / "summary.json", summary)
    (args.results_dir / "summary.md").write_text(markdown(summary))
    print(f"wrote {args.results_dir / 'summary.json'} and summary.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
