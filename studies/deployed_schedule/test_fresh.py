"""The main runs' held-out evaluation (`main_rule.md` §2): which cells and checkpoints, in
which order, and one checkpoint tuned end to end at toy size, made again only for other
weights."""

import json

import jax
import pytest

import elo
from studies.deployed_schedule import fresh, settings
from studies.fresh_cells import evaluate as fresh_cells, settings as fresh_settings


def test_the_held_out_cells_are_the_fresh_cells_without_cell_13():
    cells = fresh.held_out_cells()
    assert len(cells) == 13
    assert ("mlp-w256-d4_cifar10-8x8x3", 20000) not in cells
    assert cells == [c for c in fresh_settings.CELLS if c != fresh_settings.CELLS[12]]
    assert set(settings.FRESH_CELLS_LEFT_OUT) <= set(fresh_settings.CELLS)  # no misspelt cell


def test_the_checkpoints_run_seed_by_seed_then_the_headline_pes_seeds(tmp_path):
    named = fresh.checkpoints(tmp_path)
    assert list(named) == [
        "elo_celo2/s0",
        "pes_celo2/s0",
        "elo_celo2/s1",
        "pes_celo2/s1",
        "elo_celo2/s2",
        "pes_celo2/s2",
        "headline_pes_celo2/s1",
        "headline_pes_celo2/s2",
    ]
    assert named["pes_celo2/s1"] == tmp_path / "main/pes_celo2/s1/best_optimizer.eqx"
    for seed in (1, 2):  # committed with the headline study
        assert named[f"headline_pes_celo2/s{seed}"].is_file()
    with pytest.raises(SystemExit, match="the compared checkpoints are elo_celo2/s0"):
        fresh.chosen(["pes/s0"], named)


def test_a_checkpoint_is_tuned_once_per_cell_and_again_for_other_weights(tmp_path, monkeypatch):
    task = elo.tasks.get_task("mlp-w8-d1_mnist-8x8x1")
    monkeypatch.setattr(fresh_cells, "get_task", lambda name: task)
    monkeypatch.setattr(fresh_settings, "SWEEP_POINTS", 3)
    monkeypatch.setattr(fresh_settings, "EVAL_SEEDS", 2)
    monkeypatch.setattr(fresh_settings, "MAX_EDGE_EXTENSIONS", 0)
    monkeypatch.setattr(fresh, "TUNING_CACHE", tmp_path / "values")
    checkpoint = tmp_path / "best_optimizer.eqx"
    # Meta-trained with a constant step: the evaluation puts protocol v2's schedule on it.
    elo.save_optimizer(checkpoint, elo.Celo2(key=jax.random.key(1), init_lr=1e-3, end_lr=1e-3))
    seen = []
    real = elo.tune

    def tune(lo, *args, **kwargs):
        seen.append(lo)
        return real(lo, *args, **kwargs)

    monkeypatch.setattr(elo, "tune", tune)
    fresh.evaluate_cell(tmp_path, "pes_celo2/s0", checkpoint, task.name, 20)
    path = tmp_path / "fresh" / "pes_celo2" / "s0" / f"{task.name}@20.json"
    result = json.loads(path.read_text())
    assert result["checkpoint"] == "pes_celo2/s0"
    assert result["checkpoint_sha256"] == fresh.file_sha256(checkpoint)
    assert len(result["sweep"]) == 3 and result["value"] in result["values"]
    (lo,) = seen
    assert (lo.init_lr, lo.end_lr) == (0.0, 0.0)
    assert lo.warmup_fraction == fresh_settings.WARMUP_FRACTION
    values = tmp_path / "values" / "pes_celo2" / "s0" / f"{task.name}@20"
    assert not values.exists()  # the cell's values, removed once it is written

    fresh.evaluate_cell(tmp_path, "pes_celo2/s0", checkpoint, task.name, 20)
    assert len(seen) == 1  # cached for these weights

    elo.save_optimizer(checkpoint, elo.Celo2(key=jax.random.key(2)))
    fresh.evaluate_cell(tmp_path, "pes_celo2/s0", checkpoint, task.name, 20)
    assert len(seen) == 2  # other weights: made again, the old result set aside
    remade = json.loads(path.read_text())
    assert remade["checkpoint_sha256"] == fresh.file_sha256(checkpoint)
    assert len(list(path.parent.glob(f"{task.name}@20.json.stale-*"))) == 1


def test_an_unfinished_run_is_skipped_and_nothing_runs_before_the_rule(tmp_path, monkeypatch):
    monkeypatch.setattr(fresh, "HEADLINE_MAIN", tmp_path / "headline")
    calls = []
    monkeypatch.setattr(fresh, "evaluate_cell", lambda *a: calls.append(a))
    fresh.run(tmp_path)
    assert calls == []  # no checkpoint file exists
    run = tmp_path / "main" / "elo_celo2" / "s0"
    run.mkdir(parents=True)
    elo.save_optimizer(run / "best_optimizer.eqx", elo.Celo2(key=jax.random.key(0)))
    fresh.run(tmp_path)
    assert calls == []  # copied, but the run is not summarised: no meta.json yet
    (run / "meta.json").write_text("{}")
    fresh.run(tmp_path)
    assert [c[1] for c in calls] == ["elo_celo2/s0"] * len(fresh.held_out_cells())
    monkeypatch.setattr(fresh.main_runs, "committed_as_is", lambda path: "")
    with pytest.raises(SystemExit, match="main_rule.md is not committed as it is"):
        fresh.main(["--results-dir", str(tmp_path)])


def test_nothing_runs_before_the_ship_decision_is_committed(tmp_path, monkeypatch):
    rule = str(fresh.main_runs.MAIN_RULE)
    # main_rule.md committed, the ship decision not.
    monkeypatch.setattr(fresh.main_runs, "committed_as_is", lambda path: "c" * (str(path) == rule))
    monkeypatch.setattr(fresh, "run", lambda *a: pytest.fail("ran before the ship decision"))
    with pytest.raises(SystemExit, match="ship_rule.json is not committed as it is"):
        fresh.main(["--results-dir", str(tmp_path)])
    calls = []
    monkeypatch.setattr(fresh.main_runs, "committed_as_is", lambda path: "c")
    monkeypatch.setattr(fresh, "run", lambda *a: calls.append(a))
    assert fresh.main(["--results-dir", str(tmp_path)]) == 0
    assert calls == [(tmp_path, None)]


def summarised_run(results, name, key):
    """A summarised main run `name` whose selected checkpoint is `elo.Celo2` of seed `key`."""
    run = results / "main" / name
    run.mkdir(parents=True)
    elo.save_optimizer(run / "best_optimizer.eqx", elo.Celo2(key=jax.random.key(key)))
    (run / "meta.json").write_text("{}")
    return run / "best_optimizer.eqx"


def write_result(results, name, checkpoint, cell):
    path = results / "fresh" / name / f"{cell[0]}@{cell[1]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    sha = fresh.file_sha256(checkpoint)
    recorded = {"checkpoint": name, "checkpoint_sha256": sha, "name": name}
    path.write_text(json.dumps(recorded | {"value": 0.5, "test_loss": 1.25}))


def test_a_checkpoint_equal_to_an_earlier_one_gets_its_results_copied(tmp_path, monkeypatch):
    # PES-Celo2 seeds 1 and 2 both selected the shared warm start: one tuning serves both.
    monkeypatch.setattr(fresh, "HEADLINE_MAIN", tmp_path / "headline")
    cell = ("mlp-w8-d1_mnist-8x8x1", 20)
    monkeypatch.setattr(fresh, "held_out_cells", lambda: [cell])
    tuned = []

    def evaluate_cell(results, name, checkpoint, task_name, horizon):
        tuned.append(name)
        write_result(results, name, checkpoint, (task_name, horizon))

    monkeypatch.setattr(fresh, "evaluate_cell", evaluate_cell)
    summarised_run(tmp_path, "pes_celo2/s0", 1)
    summarised_run(tmp_path, "pes_celo2/s1", 0)
    twin = summarised_run(tmp_path, "pes_celo2/s2", 0)
    assert fresh.twins(fresh.checkpoints(tmp_path)) == {"pes_celo2/s2": "pes_celo2/s1"}

    copy = tmp_path / "fresh" / "pes_celo2" / "s2" / "mlp-w8-d1_mnist-8x8x1@20.json"
    fresh.run(tmp_path, ["pes_celo2/s2"])  # its twin has no result yet: nothing to copy
    assert tuned == [] and not copy.exists()
    fresh.run(tmp_path)
    assert tuned == ["pes_celo2/s0", "pes_celo2/s1"]
    copied = json.loads(copy.read_text())
    assert copied["copied_from"] == "pes_celo2/s1/mlp-w8-d1_mnist-8x8x1@20.json"
    assert copied["copied_by"] == fresh.common.git_commit()
    assert (copied["checkpoint"], copied["name"]) == ("pes_celo2/s2", "pes_celo2/s2")
    assert copied["checkpoint_sha256"] == fresh.file_sha256(twin)
    assert copied["test_loss"] == 1.25


def test_a_twin_copies_a_result_another_driver_finished_after_its_turn(tmp_path, monkeypatch):
    monkeypatch.setattr(fresh, "HEADLINE_MAIN", tmp_path / "headline")
    cell = ("mlp-w8-d1_mnist-8x8x1", 20)
    monkeypatch.setattr(fresh, "held_out_cells", lambda: [cell])
    source = summarised_run(tmp_path, "pes_celo2/s1", 0)
    summarised_run(tmp_path, "elo_celo2/s2", 0)  # the twin, its turn before pes_celo2/s2's
    summarised_run(tmp_path, "pes_celo2/s2", 2)

    def evaluate_cell(results, name, checkpoint, task_name, horizon):
        # Another driver holds pes_celo2/s1's cell and finishes it while this one tunes
        # pes_celo2/s2, after the twin's turn.
        if name == "pes_celo2/s2":
            write_result(results, "pes_celo2/s1", source, cell)

    monkeypatch.setattr(fresh, "evaluate_cell", evaluate_cell)
    fresh.run(tmp_path)
    copied = tmp_path / "fresh" / "elo_celo2" / "s2" / "mlp-w8-d1_mnist-8x8x1@20.json"
    assert json.loads(copied.read_text())["checkpoint"] == "elo_celo2/s2"


def test_a_twin_never_copies_a_result_made_with_other_weights(tmp_path, monkeypatch):
    cell = ("mlp-w8-d1_mnist-8x8x1", 20)
    source = summarised_run(tmp_path, "pes_celo2/s1", 0)
    twin = summarised_run(tmp_path, "pes_celo2/s2", 0)
    write_result(tmp_path, "pes_celo2/s1", source, cell)
    result = tmp_path / "fresh" / "pes_celo2" / "s1" / "mlp-w8-d1_mnist-8x8x1@20.json"
    stale = json.loads(result.read_text()) | {"checkpoint_sha256": "0" * 64}
    result.write_text(json.dumps(stale))
    fresh.copy_from_twin(tmp_path, "pes_celo2/s2", twin, "pes_celo2/s1", *cell)
    target = tmp_path / "fresh" / "pes_celo2" / "s2" / "mlp-w8-d1_mnist-8x8x1@20.json"
    assert not target.exists()
    # A result of the twin's own is kept, never overwritten by a copy.
    write_result(tmp_path, "pes_celo2/s1", source, cell)
    write_result(tmp_path, "pes_celo2/s2", twin, cell)
    before = target.read_text()
    fresh.copy_from_twin(tmp_path, "pes_celo2/s2", twin, "pes_celo2/s1", *cell)
    assert target.read_text() == before
