"""The fresh cells' driver: cell selection, the refusal before `celo2` ships, and one cell
tuned end to end at toy size (a tiny task stands in for the fresh cells)."""

import json
from pathlib import Path

import pytest

import elo
from studies.fresh_cells import evaluate, settings


def test_cells_are_chosen_by_their_number_in_the_rule():
    assert evaluate.parse_cells("1-2,14") == [
        settings.CELLS[0],
        settings.CELLS[1],
        settings.CELLS[13],
    ]
    assert evaluate.parse_cells(None) == list(settings.CELLS)
    with pytest.raises(SystemExit, match="numbered 1 to 14"):
        evaluate.parse_cells("15")
    with pytest.raises(SystemExit, match="like 4, 1-3"):
        evaluate.parse_cells("a")


def test_the_verdicts_optimizers_run_on_every_cell_before_the_others():
    names = evaluate.optimizers(None)
    cells = evaluate.parse_cells("9-14")
    order = evaluate.work_order(cells, names)
    assert sorted(order) == sorted((n, t, h) for t, h in cells for n in names)  # each pair once
    verdict = 2 * len(cells)
    assert {n for n, _, _ in order[:verdict]} == set(settings.VERDICT_OPTIMIZERS)
    assert [(t, h) for _, t, h in order[:verdict:2]] == cells  # in the rule's cell order
    published = order[verdict : verdict + len(cells)]
    assert published == [("celo2_published", t, h) for t, h in cells]  # its row next
    muon = order[verdict + len(cells) : verdict + 2 * len(cells)]
    assert muon == [("muon", t, h) for t, h in cells]
    rest = order[verdict + 2 * len(cells) :]
    assert [(t, h) for _, t, h in rest[::2]] == cells  # then the last two, cell by cell
    assert {n for n, _, _ in rest} == {"small_fc_mnist8", "sgd"}
    assert evaluate.work_order(cells, ["muon"]) == [("muon", t, h) for t, h in cells]


def test_every_fresh_task_builds():
    names = dict.fromkeys(task for task, _ in settings.CELLS)
    assert len(names) == 13  # Friedman #1 is two cells
    for name in names:
        assert evaluate.get_task(name).name == name


def test_nothing_runs_before_celo2_ships(monkeypatch):
    monkeypatch.setattr(elo, "available_pretrained", lambda: ("celo2_published",))
    with pytest.raises(SystemExit, match="not shipped yet"):
        evaluate.optimizers(None)
    assert evaluate.optimizers(["adamw"]) == ["adamw"]
    with pytest.raises(SystemExit, match="the study's optimizers are"):
        evaluate.optimizers(["adam"])


def test_the_protocol_grids_include_the_common_defaults():
    assert 1e-3 in [round(v, 12) for v in evaluate.tuning("adamw", 300)["values"]]
    assert 1.0 in evaluate.tuning("small_fc_mnist8", 300)["values"]
    assert evaluate.tuning("sgd", 300)["extend_edges"] == settings.MAX_EDGE_EXTENSIONS
    # Measured at the start and at the end only: all the rule reads (rule.md, amendments).
    assert evaluate.tuning("celo2", 20000)["eval_every"] == 20000


def test_a_cell_is_tuned_once_into_its_result(tmp_path, monkeypatch):
    task = elo.tasks.get_task("mlp-w8-d1_mnist-8x8x1")
    monkeypatch.setattr(evaluate, "get_task", lambda name: task)
    monkeypatch.setattr(settings, "SWEEP_POINTS", 3)
    monkeypatch.setattr(settings, "EVAL_SEEDS", 2)
    monkeypatch.setattr(settings, "MAX_EDGE_EXTENSIONS", 1)
    monkeypatch.setattr(evaluate, "TUNING_CACHE", tmp_path / "values")
    tuned, real = [], elo.tune

    def tune(*args, **kwargs):  # the values are kept while the cell is tuned
        tuned.append(kwargs["cache"])
        result = real(*args, **kwargs)
        assert len(list(Path(kwargs["cache"].directory).glob("value_*.json"))) >= 3
        return result

    monkeypatch.setattr(elo, "tune", tune)
    evaluate.evaluate_cell(tmp_path, "small_fc_mnist8", task.name, 20)
    path = tmp_path / "small_fc_mnist8" / f"{task.name}@20.json"
    (cache,) = tuned
    assert Path(cache.directory) == tmp_path / "values" / "small_fc_mnist8" / f"{task.name}@20"
    assert not Path(cache.directory).exists()  # removed once the cell is written
    result = json.loads(path.read_text())
    sweep = result["sweep"]
    assert len(sweep) in (3, 4) and sum(result["extended"]) == len(sweep) - 3
    assert all(len(row["test_loss"]) == 2 for row in sweep)
    for row in sweep:  # capped at the initial loss, per seed
        assert all(t <= i for t, i in zip(row["test_loss"], row["initial_test_loss"]))
    assert result["value"] == sweep[result["selected"]]["value"]
    assert len(result["weights_sha256"]) == 64
    before = path.stat().st_mtime_ns
    evaluate.evaluate_cell(tmp_path, "small_fc_mnist8", task.name, 20)
    assert path.stat().st_mtime_ns == before


def test_the_weights_digest_leaves_elo_pretrained_callable():
    """Reading the installed weights must not import `elo/pretrained/` as a module, which would
    replace the function `elo.pretrained` on the package (and stop every learned optimizer)."""
    digest = evaluate.installed_weights_sha256("small_fc_mnist8")
    assert len(digest) == 64 and callable(elo.pretrained)
    assert isinstance(elo.pretrained("small_fc_mnist8"), elo.AbstractLearnedOptimizer)
