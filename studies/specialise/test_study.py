"""The specialisation study's choice (validation only) and report, on fixture results."""

import json

import pytest

import studies.specialise.study as study


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "RESULTS", tmp_path)
    monkeypatch.setattr(study, "RUNS", tmp_path / "runs-dirs")
    monkeypatch.setattr(study, "SOURCES", ("small_fc_mnist8",))
    source = "small_fc_mnist8"
    # 1e-3 has the lower mean best validation score; its test losses are the worse ones, which
    # the choice must not see.
    scores = {1e-4: (0.050, 0.049, 0.051), 1e-3: (0.047, 0.048, 0.046)}
    for rate, per_seed in scores.items():
        for seed, score in zip(study.SEEDS, per_seed, strict=True):
            path = study.run_result_path(source, rate, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            best = {"step": 100 * (seed + 1), "score": score}
            record = {"meta_learning_rate": rate, "best": best, "seconds_this_session": 60.0}
            path.write_text(json.dumps(record))
    evaluation = tmp_path / "evaluation"
    (evaluation / source).mkdir(parents=True)

    def write(name, test_loss):
        (evaluation / f"{name}.json").write_text(json.dumps({"test_loss": test_loss}))

    write("adamw", [2e-4, 2e-4, 2e-4])
    write(f"{source}/before", [1e-3, 1e-3, 1e-3])
    for seed, loss in zip(study.SEEDS, (4e-4, 5e-4, 6e-4), strict=True):
        write(f"{source}/after_lr1e-03_s{seed}", [loss] * 3)
    return tmp_path


def test_the_meta_learning_rate_is_chosen_on_validation(results):
    assert study.chosen_rate("small_fc_mnist8") == 1e-3


def test_the_report_pairs_after_with_before_by_meta_seed(results, monkeypatch):
    monkeypatch.setattr(study.common, "environment", lambda: {"commit": "test"})
    study.report()
    summary = json.loads((results / "summary.json").read_text())["sources"]["small_fc_mnist8"]
    assert summary["chosen_meta_learning_rate"] == 1e-3
    assert summary["after_test_loss_mean"] == pytest.approx(5e-4)
    assert summary["after_minus_before"]["mean"] == pytest.approx(-5e-4)
    assert summary["after_minus_before"]["wins"] == 3
    assert summary["best_check_steps"] == [100, 200, 300]
    assert summary["meta_training_seconds_all_runs"] == 360.0
    assert "| small_fc_mnist8 | 1.000e-03 | 5.000e-04 ± " in (results / "report.md").read_text()
