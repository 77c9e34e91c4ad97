"""The main runs' driver: the runs the pilot's decision makes, the two preconditions (the
decision, a committed `main_rule.md`), and what a finished run leaves in the results."""

import subprocess
import types

import pytest

import elo
from studies import common
from studies.deployed_schedule import main_runs, pilot, settings


DECISION = {"rate": {"chosen": 3e-4}, "resume": {"chosen": 0.5}}


def test_the_main_runs_are_both_methods_seed_by_seed_at_the_pilots_choices():
    runs = main_runs.main_runs(DECISION)
    assert [(name, seed) for name, seed, _ in runs] == [
        (f"main/{method}/s{seed}", seed)
        for seed in settings.MAIN_SEEDS
        for method in ("pes_celo2", "elo_celo2")
    ]
    for name, _, config in runs:
        assert config.num_outer_steps == settings.MAIN_STEPS
        assert config.meta_learning_rate == 3e-4
        assert dict(config.optimizer_settings) == settings.OPTIMIZER_SETTINGS
        if "elo_celo2" in name:
            assert config.expert == "muon" and config.resume_probability == 0.5
            # The learned optimizer alone from 40% of the run (rule.md §1).
            assert config.supervision_steps() == (1000, 4000)
        else:
            assert config.expert == "none" and config.resume_probability == 0


def test_the_main_runs_wait_for_the_pilots_decision(tmp_path):
    with pytest.raises(SystemExit, match="pilot has not decided"):
        main_runs.load_decision(tmp_path)
    common.write_json(tmp_path / pilot.DECISION, DECISION)
    assert main_runs.load_decision(tmp_path) == DECISION


def _git(root, *argv):
    subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *argv], cwd=root, check=True, capture_output=True
    )


def _commit(root, path, text):
    path.write_text(text)
    _git(root, "add", path.name)
    _git(root, "commit", "-qm", path.name)


def test_the_main_runs_wait_for_the_decision_then_main_rule_md_committed_as_they_are(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    decision, rule = tmp_path / pilot.DECISION, tmp_path / "main_rule.md"
    with pytest.raises(SystemExit, match="pilot_decision.json is not committed"):
        main_runs.main_rule_commit(decision, rule)  # missing
    decision.write_text("{}")
    with pytest.raises(SystemExit, match="pilot_decision.json is not committed"):
        main_runs.main_rule_commit(decision, rule)  # written, not committed
    _commit(tmp_path, decision, "{}")
    with pytest.raises(SystemExit, match="main_rule.md is not committed"):
        main_runs.main_rule_commit(decision, rule)  # the rule is missing
    rule.write_text("# The main runs' rule\n")
    with pytest.raises(SystemExit, match="main_rule.md is not committed"):
        main_runs.main_rule_commit(decision, rule)  # written, not committed
    _commit(tmp_path, rule, "# The main runs' rule\n")
    commit = main_runs.main_rule_commit(decision, rule)
    assert len(commit) == 40
    rule.write_text("# The main runs' rule, edited\n")
    with pytest.raises(SystemExit, match="main_rule.md is not committed"):
        main_runs.main_rule_commit(decision, rule)  # changed since
    _commit(tmp_path, rule, "# The main runs' rule, amended\n")
    assert main_runs.main_rule_commit(decision, rule) != commit  # an amendment is a new commit
    _commit(tmp_path, decision, '{"again": 1}')
    with pytest.raises(SystemExit, match="first committed .* before the pilot's decision"):
        main_runs.main_rule_commit(decision, rule)  # the decision came after the rule
    _commit(tmp_path, rule, "# The main runs' rule, amended after the decision\n")
    with pytest.raises(SystemExit, match="first committed .* before the pilot's decision"):
        main_runs.main_rule_commit(decision, rule)  # an amendment does not move its first commit


def test_the_main_runs_settings_are_recorded_once_and_then_held(tmp_path, monkeypatch):
    main_runs.check_main_settings(tmp_path, DECISION, "c" * 40)
    recorded = common.load_json(tmp_path / "main" / "settings.json")
    assert recorded["settings"]["steps"] == settings.MAIN_STEPS
    assert recorded["settings"]["meta_learning_rate"] == 3e-4
    assert recorded["main_rule_commit"] == "c" * 40
    main_runs.check_main_settings(tmp_path, DECISION, "d" * 40)  # a later amendment: fine
    monkeypatch.setattr(settings, "MAIN_CHECK_EVERY", 1000)
    with pytest.raises(SystemExit, match="other main-run settings"):
        main_runs.check_main_settings(tmp_path, DECISION, "c" * 40)
    monkeypatch.undo()
    other = {"rate": {"chosen": 1e-3}, "resume": {"chosen": 0.5}}
    with pytest.raises(SystemExit, match="other main-run settings"):
        main_runs.check_main_settings(tmp_path, other, "c" * 40)


def test_a_main_run_is_the_pilots_meta_train_with_its_seed_and_the_main_checks(
    tmp_path, monkeypatch
):
    calls = []
    monkeypatch.setattr(elo, "meta_train", lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(
        main_runs, "train_resumable", lambda name, run, **kwargs: run(tmp_path / name) or True
    )
    name, seed, config = main_runs.main_runs(DECISION)[3]
    args = types.SimpleNamespace(runs_dir=str(tmp_path), results_dir=str(tmp_path))
    start = {"winner": "pes_celo2/s0", "path": tmp_path / "w.eqx"}
    main_runs.train(name, seed, config, args, start, "c" * 40)
    ((call_args, kwargs),) = calls
    assert call_args == (config, tmp_path / name) and seed == 1
    assert kwargs["seed"] == 1 and kwargs["init_weights_only"]
    assert kwargs["init_from"] == tmp_path / "w.eqx"
    assert kwargs["validation"].every == settings.MAIN_CHECK_EVERY
    assert kwargs["validation"].num_steps == settings.VALIDATE_STEPS


def test_a_finished_elo_run_leaves_its_checks_phases_and_both_optimizers(tmp_path):
    """A real (tiny) ELO-Celo2 run with checks, summarised as a main run."""
    config = elo.presets.elo_celo2_deployed(
        tasks=("mlp-w32-d1_mnist-8x8x1",),
        num_particles=2,
        truncation_length=3,
        min_horizon=5,
        max_horizon=10,
        initial_step_offset=2,
        num_outer_steps=4,
        supervision_start_fraction=0.25,
        supervision_end_fraction=0.5,
    )
    out = tmp_path / "run"
    task = elo.tasks.get_task("mlp-w32-d1_mnist-8x8x1")
    validation = elo.ValidationSettings(2, 5, (task,), (1.0,))
    elo.meta_train(config, out, seed=0, checkpoint_every=2, validation=validation, progress=False)
    results = tmp_path / "results"
    main_runs.summarise(out, results, config, {"winner": "pes_celo2/s0"}, "c" * 40)
    meta = common.load_json(results / "meta.json")
    steps = [c["step"] for c in meta["checks"]]
    assert steps == [0, 2, 4]
    assert all(c["mlp-w32-d1_mnist-8x8x1"] == c["score"] for c in meta["checks"])
    best = min(meta["checks"], key=lambda c: (c["score"], c["step"]))
    assert (meta["best_validation_step"], meta["best_validation_score"]) == (
        best["step"],
        best["score"],
    )
    assert meta["phases"]["imitation_until"] == 1 and meta["phases"]["alone_from"] == 2
    assert [c["step"] for c in meta["phases"]["alone_checks"]] == [2, 4]
    assert meta["outer_steps"] == 4 and meta["warm_start"] == "pes_celo2/s0"
    assert meta["main_rule_commit"] == "c" * 40
    assert isinstance(elo.load_optimizer(results / "best_optimizer.eqx"), elo.Celo2)
    assert isinstance(elo.load_optimizer(results / "final_optimizer.eqx"), elo.Celo2)
    assert (results / "run_summary.json").is_file()
    assert main_runs.phases(config.replace(expert="none"), meta["checks"]) is None


def test_a_run_whose_summary_fails_is_not_marked_summarised(tmp_path, monkeypatch):
    """`meta.json` marks a run as summarised, so it is written last: a failure before it (here,
    the selected optimizer missing) leaves none, and the next start summarises again."""
    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.setattr(main_runs, "run_summary", lambda out: {})
    config = main_runs.main_runs(DECISION)[1][2]
    with pytest.raises(FileNotFoundError):
        main_runs.summarise(out, tmp_path / "results", config, {"winner": "x"}, "c" * 40)
    assert not (tmp_path / "results" / "meta.json").exists()
