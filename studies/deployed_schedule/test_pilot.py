"""The deployed-schedule study's fixed choices on made-up results: every run's configuration is
the rule's, the warm start is ship rule v2's ranking of six, and the pilot's stages choose what
rule.md §3-4 say."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import elo
from studies import common
from studies.celo2_headline import settings as headline
from studies.deployed_schedule import pilot, settings, warm_start
from studies.fresh_cells import ship_rule


def test_every_pilot_run_is_a_valid_config_with_the_deployed_optimizer():
    for lr in settings.PILOT_LEARNING_RATES:
        pes = settings.config("pes_celo2", lr, settings.PILOT_STEPS)
        assert pes.expert == "none" and pes.resume_probability == 0
        assert dict(pes.optimizer_settings) == elo.presets.CELO2_REFERENCE_SETTINGS
        assert (pes.meta_learning_rate, pes.meta_final_learning_rate) == (lr, lr / 10)
        for p in settings.RESUME_PROBABILITIES:
            config = settings.config("elo_celo2", lr, settings.PILOT_STEPS, resume_probability=p)
            assert config.expert == "muon" and config.resume_probability == p
            assert dict(config.optimizer_settings) == elo.presets.CELO2_REFERENCE_SETTINGS
            # Imitation to step 300, the learned optimizer alone from step 1200 (rule.md §4).
            assert config.supervision_steps() == (300, 1200)
            # The paper's width, as the headline's runs.
            assert (config.num_particles, config.truncation_length) == (8, 50)
    with pytest.raises(ValueError, match="resume probability"):
        settings.config("elo_celo2", 1e-3, 10)
    with pytest.raises(ValueError, match="no resume buffer"):
        settings.config("pes_celo2", 1e-3, 10, resume_probability=0.5)
    with pytest.raises(ValueError, match="unknown method 'cl'"):
        settings.config("cl", 1e-3, 10)


def test_no_check_task_is_a_held_out_task():
    held_out = {task for task, _ in headline.cells()}
    assert not held_out & set(settings.SELECTION_TASKS)


def _write_result(path, validation):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"selected": 0, "sweep": [{"validation_loss": validation}]}))


@pytest.fixture
def headline_results(tmp_path):
    root = tmp_path / "headline"
    cells = [f"{t}@{h}.json" for t, h in headline.cells()]
    for cell in cells:
        _write_result(root / "evaluation" / "baselines" / "adamw" / cell, 1.0)
    for candidate in settings.WARM_START_CANDIDATES:
        for cell in cells:
            _write_result(ship_rule.candidate_dir(root / "evaluation", candidate) / cell, 1.1)
        checkpoint = warm_start.checkpoint_path(root, candidate)
        checkpoint.parent.mkdir(parents=True)
        checkpoint.write_bytes(candidate.encode())
    return root, cells


def test_the_warm_start_is_ship_rule_v2s_first_of_the_six(headline_results):
    root, cells = headline_results
    for cell in cells[:2]:
        _write_result(ship_rule.candidate_dir(root / "evaluation", "elo_celo2/s2") / cell, 0.9)
    # The published Celo2 is not a candidate: its results are not needed.
    record = warm_start.choose(root)
    assert record["winner"] == "elo_celo2/s2"
    assert record["checkpoint"] == str(warm_start.checkpoint_path(root, "elo_celo2/s2"))
    assert set(record["candidates"]) == set(settings.WARM_START_CANDIDATES)
    (ship_rule.candidate_dir(root / "evaluation", "pes_celo2/s0") / cells[0]).unlink()
    with pytest.raises(SystemExit, match="1 result"):
        warm_start.choose(root)


def test_a_warm_start_file_that_changed_is_refused(tmp_path):
    checkpoint = tmp_path / "best_optimizer.eqx"
    checkpoint.write_bytes(b"weights")
    record = {"winner": "pes_celo2/s0", "checkpoint": str(checkpoint), "sha256": ""}
    common.write_json(tmp_path / warm_start.WARM_START, record)
    with pytest.raises(SystemExit, match="SHA-256 differs"):
        warm_start.load(tmp_path)
    with pytest.raises(SystemExit, match="warm-start` first"):
        warm_start.load(tmp_path / "elsewhere")


def _finished(results, name, scores):
    """A finished pilot run whose checks at 0, 1000, 2000, 3000 scored `scores`."""
    steps = (0, 1000, 2000, 3000)
    checks = [{"step": s, "score": x} for s, x in zip(steps, scores, strict=True)]
    common.write_json(results / "pilot" / name / "meta.json", {"checks": checks})


def test_stage_1_chooses_the_lowest_mean_of_the_last_two_checks(tmp_path):
    rates = settings.PILOT_LEARNING_RATES
    for lr in rates[:-1]:
        _finished(tmp_path, pilot.rate_run(lr), [1.0, 0.95, 0.9, 0.9])
    assert pilot.decide(tmp_path)["rate"] is None  # the last rate's run is unfinished
    # 1e-2 has the best single check (0.5) but not the best mean of 2000 and 3000.
    _finished(tmp_path, pilot.rate_run(rates[-1]), [1.0, 0.5, 0.95, 0.9])
    _finished(tmp_path, pilot.rate_run(3e-4), [1.0, 0.99, 0.88, 0.86])
    decision = pilot.decide(tmp_path)
    assert decision["rate"]["chosen"] == 3e-4 and decision["resume"] is None
    assert decision["rate"]["chosen_still_improving"]
    assert set(decision["rate"]["below_warm_start"]) == {pilot.rate_run(lr) for lr in rates}


def test_ties_go_to_the_smaller_rate_and_the_smaller_probability(tmp_path):
    for lr in settings.PILOT_LEARNING_RATES:
        _finished(tmp_path, pilot.rate_run(lr), [1.0, 0.9, 0.9, 0.9])
    lr = settings.PILOT_LEARNING_RATES[0]
    for p in settings.RESUME_PROBABILITIES:
        _finished(tmp_path, pilot.resume_run(lr, p), [1.0, 1.1, 1.2, 1.3])
    decision = pilot.decide(tmp_path)
    assert decision["rate"]["chosen"] == lr
    assert decision["resume"]["chosen"] == settings.RESUME_PROBABILITIES[0]
    assert not decision["resume"]["chosen_still_improving"]


def test_step_0_checks_that_differ_stop_the_pilot(tmp_path):
    for lr in settings.PILOT_LEARNING_RATES:
        _finished(tmp_path, pilot.rate_run(lr), [1.0, 0.9, 0.9, 0.9])
    _finished(tmp_path, pilot.rate_run(1e-3), [1.001, 0.9, 0.9, 0.9])
    with pytest.raises(SystemExit, match="step-0 checks on .* differ"):
        pilot.decide(tmp_path)


def _segments(results, name, *environments):
    """A run's `segments.json`: one segment per (cpu_model, device_count, from_step)."""
    segments = [
        {"environment": {"cpu_model": "x", "device_count": 0}, "from_step": step}
        | {"run_environment": {"cpu_model": cpu, "device_count": devices}}
        for cpu, devices, step in environments
    ]
    common.write_json(results / "pilot" / name / "segments.json", segments)


def test_step_0_checks_are_compared_within_the_environment_that_made_them(tmp_path):
    """rule.md, amendment of 2026-12-02: another CPU or device count rounds the check's 5,000
    training steps otherwise, so only checks made in the same environment must agree."""
    rates = settings.PILOT_LEARNING_RATES
    _finished(tmp_path, pilot.rate_run(rates[0]), [1.001, 0.9, 1.0005, 1.0005])
    # Its step-0 check came from a session on one device, stopped and resumed on two.
    _segments(tmp_path, pilot.rate_run(rates[0]), ("AMD", 1, 0), ("AMD", 2, 1285))
    for lr in rates[1:]:
        _finished(tmp_path, pilot.rate_run(lr), [1.0, 0.9, 1.0004, 1.0004])
        _segments(tmp_path, pilot.rate_run(lr), ("AMD", 2, 0), ("Intel", 2, 0))
    decision = pilot.decide(tmp_path)  # the 1.001 stands alone in its environment
    assert decision["rate"]["step0_environment"][pilot.rate_run(rates[0])] == ["AMD", 1]
    assert decision["rate"]["step0_environment"][pilot.rate_run(rates[1])] == ["Intel", 2]
    # Each run against its own step-0 check: 1.0005 < 1.001, but 1.0004 > 1.0.
    assert decision["rate"]["below_warm_start"] == [pilot.rate_run(rates[0])]
    _finished(tmp_path, pilot.rate_run(rates[1]), [1.001, 0.9, 1.0004, 1.0004])
    with pytest.raises(SystemExit, match=r"step-0 checks on \('Intel', 2\) differ"):
        pilot.decide(tmp_path)


def test_a_run_alone_in_its_environment_is_held_to_the_measured_check_and_to_the_others(
    tmp_path,
):
    rates = settings.PILOT_LEARNING_RATES
    for i, lr in enumerate(rates):
        _finished(tmp_path, pilot.rate_run(lr), [1.0 + 1e-3 * (i == 0), 0.9, 0.9, 0.9])
        _segments(tmp_path, pilot.rate_run(lr), ("AMD" if i == 0 else "Intel", 2, 0))
    pilot.decide(tmp_path)  # AMD's 1.001 is alone in its environment, within 1e-2 of the rest
    measured = tmp_path / pilot.STEP0_CHECKS / "warm_start_amd_2dev.json"
    common.write_json(
        measured, {"score": 1.0, "environment": {"cpu_model": "AMD", "device_count": 2}}
    )
    with pytest.raises(SystemExit, match=r"step-0 checks on \('AMD', 2\) differ"):
        pilot.decide(tmp_path)  # the warm start's check measured there is 1.0
    measured.unlink()
    _finished(tmp_path, pilot.rate_run(rates[0]), [1.05, 0.9, 0.9, 0.9])
    with pytest.raises(SystemExit, match="more than the environments' rounding"):
        pilot.decide(tmp_path)


def test_the_step_0_measurements_are_where_the_pilot_reads_them():
    from studies.deployed_schedule import step0_check

    assert step0_check.RESULTS == pilot.HERE / "results" / pilot.STEP0_CHECKS


def test_a_step_0_check_that_differs_stops_the_pilot_after_that_run(tmp_path, monkeypatch):
    """Checked after each run, not only once a stage is complete: two finished runs suffice."""
    _finished(tmp_path, pilot.rate_run(1e-4), [1.0, 0.9, 0.9, 0.9])
    monkeypatch.setattr(
        pilot,
        "train_resumable",
        lambda name, **kwargs: (
            _finished(tmp_path, name.removeprefix("pilot/"), [1.5, 0.9, 0.9, 0.9]) or True
        ),
    )
    args = types.SimpleNamespace(runs_dir=str(tmp_path / "runs"), results_dir=str(tmp_path))
    config = settings.config("pes_celo2", 3e-4, settings.PILOT_STEPS)
    with pytest.raises(SystemExit, match="step-0 checks on .* differ"):
        pilot.train(pilot.rate_run(3e-4), config, args, {"winner": "x", "path": tmp_path})


def test_a_pilot_run_is_meta_train_from_the_warm_start_with_the_rules_checks(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(elo, "meta_train", lambda *args, **kwargs: calls.append((args, kwargs)))
    config = settings.config("pes_celo2", 1e-3, settings.PILOT_STEPS)
    start = {"winner": "elo_celo2/s1", "path": tmp_path / "w.eqx"}
    pilot.meta_train_run(config, tmp_path / "run", start)
    ((args, kwargs),) = calls
    assert args == (config, tmp_path / "run")
    assert kwargs["seed"] == settings.PILOT_SEED and kwargs["init_weights_only"]
    assert kwargs["init_from"] == tmp_path / "w.eqx"
    validation = kwargs["validation"]
    assert (validation.every, validation.num_steps) == (1000, 5000)
    assert validation.scales == (1.0,)
    assert [t.name for t in validation.tasks] == list(settings.SELECTION_TASKS)


def test_the_pilot_gets_one_device_per_core_before_it_records_its_settings(tmp_path):
    # A fresh process: JAX keeps the devices it starts with. Recording the settings first
    # started JAX on one device (and `use_cpu_cores` then could not change it). Two cores are
    # made to seem available (the affinity mask `elo.available_cores` reads), so that one
    # device is wrong on any machine without a one-core CPU quota.
    root = Path(__file__).parents[2]
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env["PYTHONPATH"] = str(root)
    script = (
        "import os, sys, pathlib, jax, elo\n"
        "os.sched_getaffinity = lambda pid: {0, 1}\n"
        "from studies.deployed_schedule import pilot\n"
        "devices = pilot.prepare(pathlib.Path(sys.argv[1]))\n"
        "print('devices', devices, len(jax.devices('cpu')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    last = result.stdout.strip().splitlines()[-1].split()
    assert last == ["devices", "2", "2"]
    assert "2 JAX CPU devices" in result.stdout  # the driver's log says how many
    assert (tmp_path / "settings.json").is_file()
