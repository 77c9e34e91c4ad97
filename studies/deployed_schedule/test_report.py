"""The deployed-schedule report on made-up results: every run's state from committed files
only, the pilot's tables and choice, and the main runs' curves with ELO's phases."""

import re

from studies import common
from studies.deployed_schedule import main_runs, pilot, report, settings


# ELO's phases at 10,000 outer steps (`main_runs.phases`): imitation to 10%, alone from 40%.
PHASES = {"imitation_until": 1000, "alone_from": 4000}


def _segments(results, name, steps, commit="abc1234"):
    common.write_json(
        results / name / "segments.json",
        [{"environment": {"commit": commit}, "from_step": 0, "to_step": steps}],
    )


def _finished_pilot(results, name, scores):
    steps = (0, 1000, 2000, 3000)
    checks = [{"step": s, "score": x} for s, x in zip(steps, scores, strict=True)]
    common.write_json(results / "pilot" / name / "meta.json", {"checks": checks})
    _segments(results, f"pilot/{name}", settings.PILOT_STEPS)


def _results(tmp_path):
    common.write_json(tmp_path / "warm_start.json", {"winner": "pes_celo2/s0"})
    return tmp_path


def test_an_unfinished_pilot_reports_each_runs_state_and_no_choice(tmp_path):
    results = _results(tmp_path)
    rates = settings.PILOT_LEARNING_RATES
    _segments(results, f"pilot/{pilot.rate_run(rates[0])}", 1285)
    _finished_pilot(results, pilot.rate_run(rates[1]), [1.0, 0.9, 0.8, 0.7])
    summary = report.summarise(results)
    states = [row["state"] for row in summary["pilot"]["stage1"]]
    assert states == ["at outer step 1285 of 3000", "finished"] + [report.NOT_STARTED] * 3
    assert summary["pilot"]["stage1"][1]["score"] == 0.75
    assert summary["pilot"]["stage1"][0]["checks"] is None  # no check before the run ends
    assert summary["pilot"]["stage2"] is None and summary["main"] is None
    assert summary["segments_by_commit"] == {"abc1234": 2}
    text = report.markdown(summary)
    assert "Stage 1 has not decided" in text and "(chosen)" not in text
    assert "| 0.0003 | finished | 1.0000 | 0.9000 | 0.8000 | 0.7000 | 0.7500 |" in text


def test_a_decided_pilot_and_finished_main_runs_give_the_choice_and_the_curves(tmp_path):
    results = _results(tmp_path)
    for lr in settings.PILOT_LEARNING_RATES:
        _finished_pilot(results, pilot.rate_run(lr), [1.0, 0.95, 0.9, 0.9])
    _finished_pilot(results, pilot.rate_run(1e-3), [1.0, 0.9, 0.8, 0.8])
    for p in settings.RESUME_PROBABILITIES:
        _finished_pilot(results, pilot.resume_run(1e-3, p), [1.0, 0.9, 0.85, 0.85])
    decision = pilot.decide(results)
    common.write_json(results / pilot.DECISION, decision)
    steps = range(0, settings.MAIN_STEPS + 1, settings.MAIN_CHECK_EVERY)
    for seed, offset in ((0, 0.0), (1, 0.02)):
        for method in ("pes_celo2", "elo_celo2"):
            checks = [{"step": s, "score": 1.0 - s / 1e5 + offset} for s in steps]
            phases = None if method == "pes_celo2" else PHASES
            meta = {
                "checks": checks,
                "best_validation_step": settings.MAIN_STEPS,
                "best_validation_score": checks[-1]["score"],
                "phases": phases,
            }
            name = main_runs.run_name(method, seed)
            common.write_json(results / name / "meta.json", meta)
            _segments(results, name, settings.MAIN_STEPS)
    summary = report.summarise(results)
    assert summary["pilot"]["decision"]["rate"]["chosen"] == 1e-3
    assert [row["state"] for row in summary["pilot"]["stage2"]] == ["finished"] * 3
    runs = summary["main"]["runs"]
    assert runs["main/elo_celo2/s2"]["state"] == report.NOT_STARTED
    assert runs["main/elo_celo2/s1"]["phases"] == PHASES
    point = summary["main"]["curves"]["pes_celo2"]["2000"]
    assert point["n"] == 2 and abs(point["mean"] - 0.99) < 1e-12
    assert point["ci95"] > 0
    text = report.markdown(summary)
    assert "Stage 1 chose 0.001" in text and "| 0.001 **(chosen)** |" in text
    assert "| main/pes_celo2/s0 | finished | 10000 | PES | 0.9000 |" in text
    assert "| main/elo_celo2/s0 | finished | 10000 | alone | 0.9000 |" in text


def test_a_pilot_stopped_by_its_step_0_checks_is_reported_as_stopped(tmp_path):
    results = _results(tmp_path)
    _finished_pilot(results, pilot.rate_run(1e-4), [1.0, 0.9, 0.8, 0.7])
    _finished_pilot(results, pilot.rate_run(3e-4), [1.5, 0.9, 0.8, 0.7])
    summary = report.summarise(results)
    assert re.search(r"step-0 checks on .* differ", summary["pilot"]["stopped"])
    assert "**The pilot stopped:**" in report.markdown(summary)


def test_the_committed_report_is_the_one_the_committed_results_make():
    summary = common.load_json(report.RESULTS / "summary.json")
    assert report.summarise() == summary
    assert report.markdown(summary) == (report.RESULTS / "summary.md").read_text()


def test_the_margin_is_given_beside_how_far_the_environments_move_the_warm_starts_check():
    stage = {
        "scores": {"a": 0.40, "b": 0.404, "c": 0.5},
        "step0": {"a": 0.414, "b": 0.414, "c": 0.4145},
        "step0_environment": {"a": ["Intel", 2], "b": ["Intel", 2], "c": ["AMD", 1]},
    }
    text = report.margin_text(stage, [stage], [["Intel", 1, 0.4141]])
    assert "score is 1.0e-02 (relative) below the next; the" in text
    assert "moves by 1.2e-03 across the 3 environments that measured it" in text
    # A later stage's margin is set beside every stage's step-0 checks, not its own alone.
    later = {
        "scores": {"d": 0.37, "e": 0.3703},
        "step0": {"d": 0.414, "e": 0.414},
        "step0_environment": {"d": ["Intel", 2], "e": ["Intel", 2]},
    }
    text = report.margin_text(later, [stage, later], [])
    assert "below the next (within it); the warm start's check moves by 1.2e-03" in text
    assert "across the 2 environments" in text
    one = {"scores": {"a": 1.0}, "step0": {"a": 1.0}}
    assert report.margin_text(one, [one], []) == ""
    row = {"step0_environment": ["AMD EPYC", 1]}
    assert report._environment(row) == "AMD EPYC, 1 device"
    assert report._environment({"step0_environment": None}) == "–"


def test_a_selected_checkpoint_is_given_its_phase():
    phases = PHASES
    assert report.selected_phase(0, phases) == "the warm start"
    assert report.selected_phase(0, None) == "the warm start"
    assert report.selected_phase(500, phases) == "imitation"
    assert report.selected_phase(1000, phases) == "imitation"  # after updates 0..999 only
    assert report.selected_phase(1001, phases) == "imitation"  # update 1000: still imitation
    assert report.selected_phase(1002, phases) == "ramp"
    assert report.selected_phase(2000, phases) == "ramp"
    assert report.selected_phase(4000, phases) == "alone"
    assert report.selected_phase(10000, phases) == "alone"
    assert report.selected_phase(2000, None) == "PES"
