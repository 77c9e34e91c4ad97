"""The headline study's fixed choices: every run's configuration is valid, and the pilot's and
the checkpoint selection's rules pick what they say, on synthetic results."""

import fcntl
import json
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import elo
from studies import common
from studies.celo2_headline import settings, shipped_report, study


@pytest.mark.parametrize("arm", list(settings.ARMS))
@pytest.mark.parametrize("schedule", list(settings.PILOT_SCHEDULES))
def test_every_run_configuration_is_a_valid_config_at_the_papers_width(arm, schedule):
    fields = settings.preset_overrides(arm, 3e-4, schedule, settings.META_STEPS)
    config = elo.presets.get_preset(settings.ARMS[arm].preset, **fields)
    assert len(config.tasks) == 3 and config.num_particles == 8
    assert (config.truncation_length, config.min_horizon, config.max_horizon) == (50, 100, 2000)
    assert config.num_outer_steps == settings.META_STEPS
    assert config.meta_final_learning_rate == pytest.approx(3e-5)
    assert config.optimizer == ("celo2" if "celo2" in arm else "small_fc")
    if arm in settings.ELO_ARMS:
        start, end, floor = settings.PILOT_SCHEDULES[schedule]
        assert config.supervision_start_fraction == start
        assert config.supervision_end_fraction == end
        assert config.direction_floor == floor
        assert config.expert == ("muon" if "celo2" in arm else "adamw")
    else:
        assert config.expert == "none" and config.resume_probability == 0.0


def test_selection_tasks_are_not_held_out_tasks():
    assert not set(settings.SELECTION_TASKS) & set(settings.HELD_OUT_IMAGE)
    for name in settings.SELECTION_TASKS:
        elo.tasks.get_task(name)  # every name resolves


def test_meta_train_command_parses_and_carries_every_override(tmp_path):
    fields = settings.preset_overrides("elo_celo2", 1e-3, "reference_5_50", 40)
    argv = study.meta_train_argv("elo_celo2", 3, tmp_path / "run", fields, pilot=True)
    assert argv[argv.index("--validate-task") + 1] == ",".join(settings.SELECTION_TASKS)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "direction_floor=0.3" in sets and "meta_learning_rate=0.001" in sets
    assert argv[argv.index("--steps") + 1] == "40" and argv[argv.index("--seed") + 1] == "3"


def test_the_run_in_process_is_the_command_it_records(tmp_path, monkeypatch):
    """`meta_train_run` calls `elo.meta_train` with what `meta_train_argv` records."""
    fields = settings.preset_overrides("elo_celo2", 1e-3, "reference_5_50", 40)
    calls = []
    monkeypatch.setattr(elo, "meta_train", lambda *args, **kwargs: calls.append((args, kwargs)))
    study.meta_train_run("elo_celo2", 3, tmp_path / "run", fields, pilot=True)
    ((config, out), kwargs), *_ = calls
    argv = study.meta_train_argv("elo_celo2", 3, tmp_path / "run", fields, pilot=True)
    value = {flag: argv[argv.index(flag) + 1] for flag in argv if flag.startswith("--")}
    assert config == elo.presets.get_preset(value["--preset"], **fields)
    assert str(out) == value["--out"] and str(kwargs["seed"]) == value["--seed"]
    assert str(kwargs["checkpoint_every"]) == value["--checkpoint-every"]
    validation = kwargs["validation"]
    assert str(validation.every) == value["--validate-every"]
    assert str(validation.num_steps) == value["--validate-steps"]
    tasks = ",".join(elo.tasks.task_label(t).split("@")[0] for t in validation.tasks)
    assert tasks == value["--validate-task"] and kwargs["progress"] is False


def test_choose_takes_the_lowest_finite_score_and_breaks_ties_by_order():
    assert study.choose({1e-4: 0.5, 3e-4: 0.4, 1e-3: math.nan}) == 3e-4
    assert study.choose({1e-4: 0.4, 3e-4: 0.4, 1e-3: None}) == 1e-4
    with pytest.raises(ValueError, match="no candidate"):
        study.choose({1e-4: None, 3e-4: math.inf})


def _finished(results, name, score):
    common.write_json(results / name / "meta.json", {"best_validation_score": score})


def test_the_pilot_decides_each_methods_rate_then_elos_schedule(tmp_path):
    scores = {
        "pes_celo2": (0.50, 0.45, 0.47, 0.46, 0.49),
        "elo_celo2": (0.60, 0.52, 0.48, 0.50, 0.60),
    }
    for arm, values in scores.items():
        for lr, score in zip(settings.PILOT_LEARNING_RATES, values):
            name = study.run_name(arm, 0, lr, settings.DEFAULT_SCHEDULE, True)
            _finished(tmp_path, name, score)
    partial = study.pilot_decision(tmp_path)
    assert partial is not None and partial["schedule"] is None
    assert partial["learning_rate"] == {"pes_celo2": 3e-4, "elo_celo2": 1e-3}
    _finished(tmp_path, study.run_name("elo_celo2", 0, 1e-3, "reference_5_50", True), 0.47)
    decision = study.pilot_decision(tmp_path)
    assert decision["schedule"] == "reference_5_50"
    assert decision["learning_rate"]["elo_small_fc"] == 1e-3
    assert decision["learning_rate"]["pes_small_fc"] == 3e-4
    json.dumps(decision)  # recordable


def test_a_recovered_check_counts_in_the_pilot_decision(tmp_path):
    for arm in ("pes_celo2", "elo_celo2"):
        for lr in settings.PILOT_LEARNING_RATES:
            _finished(tmp_path, study.run_name(arm, 0, lr, settings.DEFAULT_SCHEDULE, True), 0.5)
    name = study.run_name("elo_celo2", 0, 1e-2, settings.DEFAULT_SCHEDULE, True)
    assert study.pilot_decision(tmp_path)["learning_rate"]["elo_celo2"] == 1e-4  # all tied
    common.write_json(tmp_path / name / "recovered_checks.json", [{"validation": {"score": 0.4}}])
    assert study.pilot_decision(tmp_path)["learning_rate"]["elo_celo2"] == 1e-2


def test_the_pilot_runs_the_largest_rates_first():
    runs = study.pilot_runs()
    assert [(arm, lr) for _, arm, lr, _ in runs[:2]] == [("pes_celo2", 1e-2), ("elo_celo2", 1e-2)]
    assert len(runs) == 2 * len(settings.PILOT_LEARNING_RATES)


def test_an_unfinished_pilot_decides_nothing(tmp_path):
    _finished(tmp_path, study.run_name("pes_celo2", 0, 1e-4, "", True), 0.5)
    assert study.pilot_decision(tmp_path) is None


def test_a_results_directory_continues_only_with_the_same_meta_training_settings(
    tmp_path, monkeypatch
):
    study.check_settings(tmp_path)
    study.check_settings(tmp_path)  # unchanged: continues
    monkeypatch.setattr(settings, "META_STEPS", settings.META_STEPS + 1)
    with pytest.raises(SystemExit, match="other settings"):
        study.check_settings(tmp_path)


def test_evaluation_summary_reports_the_chosen_value_the_default_and_every_value():
    from studies.celo2_headline import evaluate

    tuned = elo.tune("adamw", "quadratic-d10", num_steps=6, values=[1e-3, 1.0], seeds=2)
    summary = evaluate.summarise(tuned, seconds=1.0)
    assert summary["selected"] == tuned.selected and summary["value"] == tuned.value
    assert [v["value"] for v in summary["sweep"]] == pytest.approx([1e-3, 1.0])
    assert summary["default_index"] == 1  # the value closest to 1 (a learned optimizer's default)
    chosen = summary["sweep"][summary["selected"]]
    assert summary["test_loss"] == chosen["test_loss"]
    value, diverged = evaluate.capped_final(tuned.best)
    assert value == pytest.approx(chosen["test_loss"]) and diverged == chosen["diverged"]
    json.dumps(summary, allow_nan=False)


def test_a_sweep_whose_every_value_diverged_is_still_written():
    from studies.celo2_headline import evaluate

    tuned = elo.tune("sgd", "quadratic-d10", num_steps=6, values=[1e10, 1e12], seeds=2)
    summary = evaluate.summarise(tuned, seconds=1.0)
    assert summary["diverged"] and None in summary["test_loss_curve"]  # inf/nan became None
    json.dumps(summary, allow_nan=False)  # what common.write_json demands


def test_every_protocol_cell_is_listed_once():
    from studies.celo2_headline import evaluate

    cells = evaluate.cells()
    assert len(cells) == len(set(cells)) == 14


def test_task_restricts_baselines_and_horizon_to_that_tasks_cells(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    task = "mlp-w64-d2_cifar10-8x8x3"
    assert evaluate.cells([task]) == [(task, 1000), (task, 5000), (task, 10000)]
    calls = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, *args: calls.append(path))
    evaluate.run_baselines(tmp_path, [task])
    assert {p.name for p in calls} == {f"{task}@{h}.json" for h in (1000, 5000, 10000)}
    assert len(calls) == 3 * len(evaluate.BASELINES)
    calls.clear()
    monkeypatch.setattr(evaluate.elo, "load_optimizer", lambda path: path)
    monkeypatch.setattr(evaluate, "SMALL_FC_STUDY", tmp_path)
    evaluate.run_long_horizon(tmp_path, [task])
    assert {p.name for p in calls} == {f"{task}@30000.json"} and len(calls) == 11
    with pytest.raises(SystemExit, match="not a held-out task.*mlp-w128-d3_fashionmnist"):
        evaluate.cells(["mlp-w32-d1_fashionmnist-8x8x1"])  # a selection task, not held out
    monkeypatch.setattr(
        sys, "argv", ["evaluate", "runs", "--results-dir", str(tmp_path), "--task", "nope"]
    )
    with pytest.raises(SystemExit, match="'nope' is not a held-out task"):
        evaluate.main()
    assert not (tmp_path / "evaluation").exists()  # refused before anything was written


def test_a_shipped_result_made_with_other_weights_is_set_aside(tmp_path):
    """`evaluate.py shipped` keeps a cached result only for the weights it was made with, and
    never overwrites what it sets aside."""
    from studies.celo2_headline import evaluate

    path = tmp_path / "task@100.json"
    common.write_json(path, {"test_loss": 1.0, "weights_sha256": "a" * 64})
    evaluate.set_aside_stale(path, {"weights_sha256": "a" * 64})
    assert path.is_file()  # the same weights: kept
    evaluate.set_aside_stale(path, {"weights_sha256": "b" * 64})
    assert not path.is_file()
    assert common.load_json(tmp_path / f"task@100.json.stale-{'a' * 12}")["test_loss"] == 1.0
    for loss in (2.0, 3.0):  # made before results recorded their weights
        common.write_json(path, {"test_loss": loss})
        evaluate.set_aside_stale(path, {"weights_sha256": "b" * 64})
    assert common.load_json(tmp_path / "task@100.json.stale-unknown")["test_loss"] == 2.0
    assert common.load_json(tmp_path / "task@100.json.stale-unknown-2")["test_loss"] == 3.0
    evaluate.set_aside_stale(path, {"weights_sha256": "b" * 64})  # nothing there: nothing to do
    assert not path.is_file()


def test_a_decayed_result_made_with_another_schedule_is_set_aside(tmp_path):
    from studies.celo2_headline import evaluate

    path = tmp_path / "task@100.json"
    required = {"lo_schedule": dict(settings.DECAYED_SCHEDULE)}
    common.write_json(path, {"test_loss": 1.0} | required)
    evaluate.set_aside_stale(path, required)
    assert path.is_file()  # the same schedule: kept
    other = {"lo_schedule": {**settings.DECAYED_SCHEDULE, "end_lr": 1e-4}}
    common.write_json(path, {"test_loss": 2.0} | other)
    evaluate.set_aside_stale(path, required)
    assert not path.is_file()
    (stale,) = tmp_path.glob("task@100.json.stale-*")
    assert stale.name == f"task@100.json.stale-{evaluate.stale_tag(other)}"
    assert common.load_json(stale)["test_loss"] == 2.0


def test_shipped_weights_must_be_the_installed_ones(monkeypatch):
    """The digest recorded is of the weights `elo.pretrained` loads, which must be the source
    tree's that the report compares with."""
    from studies.celo2_headline import evaluate

    name = "small_fc_mnist8"
    assert evaluate.installed_weights_digest(name) == shipped_report.weights_digest(name)
    monkeypatch.setattr(shipped_report, "weights_digest", lambda name: "0" * 64)
    with pytest.raises(SystemExit, match="not this source tree's"):
        evaluate.installed_weights_digest(name)
    with pytest.raises(SystemExit, match="elo ships no"):
        evaluate.installed_weights_digest("no_such_optimizer")


def test_shipped_decayed_tunes_item_4s_schedule_into_its_own_folder(tmp_path, monkeypatch, capsys):
    """`evaluate.py shipped --decayed`: a shipped SmallFC is tuned with a warm-up and a cosine
    decay of its own step to 0 (its weights unchanged) into `shipped_decayed/<name>/`, the
    result recording the shipped file's digest and the schedule; an optimizer that already
    ships with the decayed schedule is skipped."""
    from studies.celo2_headline import evaluate

    small_fc = elo.SmallFC(key=jax.random.key(0))
    shipped = {
        "sfc": small_fc,
        "c2": elo.Celo2(key=jax.random.key(1)).with_hyperparameters(**settings.DECAYED_SCHEDULE),
    }
    monkeypatch.setattr(evaluate.elo, "available_pretrained", lambda: dict.fromkeys(shipped))
    monkeypatch.setattr(evaluate.elo, "pretrained", shipped.__getitem__)
    monkeypatch.setattr(evaluate, "installed_weights_digest", lambda name: name[0] * 64)
    tuned = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda *args, required: tuned.append(args))
    task = "gru-h32_mnist-rows-8x8"
    argv = ["evaluate", "shipped", "--results-dir", str(tmp_path), "--task", task, "--decayed"]
    monkeypatch.setattr(sys, "argv", argv)
    evaluate.main()
    ((path, lo, *_),) = tuned
    assert path == tmp_path / "evaluation" / "shipped_decayed" / "sfc" / f"{task}@2000.json"
    assert (lo.use_cosine_schedule, lo.step_mult_min, lo.init_lr) == (True, 0.0, 0.0)
    assert lo.warmup_fraction == 0.05 and lo.step_mult == small_fc.step_mult
    assert jnp.array_equal(lo.w0, small_fc.w0)
    assert float(lo.learning_rate(999, 1000)) == 0.0 < float(lo.learning_rate(50, 1000))
    assert not small_fc.use_cosine_schedule  # the shipped optimizer itself is unchanged
    recorded = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda *a, required: recorded.append(required))
    evaluate.run_shipped(tmp_path / "evaluation", [task], ["sfc"], decay=True)
    assert recorded == [
        {"weights_sha256": "s" * 64, "lo_schedule": settings.DECAYED_SCHEDULE_SMALL_FC}
    ]
    argv = ["evaluate", "runs", "--results-dir", str(tmp_path), "--decayed"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as refused:
        evaluate.main()
    assert refused.value.code == 2
    assert "--decayed applies to `shipped` only" in capsys.readouterr().err


def test_run_stats_blocks_sum_and_bound_each_block():
    from studies.harness import runs

    records = [
        {
            "step": t,
            "seconds": 0.5 if t % 2 else 1.5,
            "alpha": 0.0 if t <= 1000 else 1.0,
            "buffer_resumes": 1,
            "fresh_resets": t % 3 == 0,
            "diverged": int(t == 1500),
            "mean_inner_step": float(t),
            "max_inner_step": 2 * t,
            "grad_norm": None if t == 7 else 2.0,
        }
        for t in range(1, 1501)
    ]
    first, second = runs.blocks(records)
    assert first["steps"] == [1, 1000] and second["steps"] == [1001, 1500]
    assert first["mean_alpha"] == 0.0 and second["mean_alpha"] == 1.0
    assert first["buffer_resumes"] == 1000 and second["buffer_resumes"] == 500
    assert first["fresh_resets"] == 333 and (first["diverged"], second["diverged"]) == (0, 1)
    assert first["mean_inner_step"] == 500.5 and second["max_inner_step"] == 3000
    assert first["median_grad_norm"] == 2.0 and first["median_seconds"] == 1.0


def test_stacked_tuning_writes_each_result_as_tuning_alone_would(tmp_path):
    from studies.celo2_headline import evaluate

    small = [elo.SmallFC(key=jax.random.key(k)) for k in (1, 2)]
    celo2 = elo.Celo2(key=jax.random.key(3))
    items = [(tmp_path / n, lo) for n, lo in zip("abc", [small[0], celo2, small[1]])]
    groups = evaluate.architectures(items)
    assert [[p.name for p, _ in g] for g in groups] == [["a", "c"], ["b"]]

    task, horizon = "regression-mlp-w64-d2_teacher16", 4
    paths = [tmp_path / "stacked" / f"{n}.json" for n in ("s0", "s1")]
    evaluate.tune_cached_stacked(list(zip(paths, small)), task, horizon)
    alone = tmp_path / "alone.json"
    evaluate.tune_cached(alone, small[1], task, horizon)
    stacked, single = common.load_json(paths[1]), common.load_json(alone)
    assert stacked["stacked_with"] == 2 and "stacked_with" not in single
    assert stacked["seconds"] == pytest.approx(stacked["group_seconds"] / 2)
    assert stacked["selected"] == single["selected"]
    got = [v["validation_loss"] for v in stacked["sweep"]]
    want = [v["validation_loss"] for v in single["sweep"]]
    assert got == pytest.approx(want, rel=1e-5)  # float32 round-off of a differently batched sum
    assert common.load_json(paths[0])["sweep"] != stacked["sweep"]  # s0's own weights
    common.write_json(paths[1], {"kept": True})
    paths[0].unlink()
    evaluate.tune_cached_stacked(list(zip(paths, small)), task, horizon)  # redoes s0 only
    assert common.load_json(paths[1]) == {"kept": True}
    assert common.load_json(paths[0])["stacked_with"] == 1
    paths[0].unlink()
    paths[1].unlink()
    with open(paths[1].with_suffix(".lock"), "w") as other_driver:
        fcntl.flock(other_driver, fcntl.LOCK_EX | fcntl.LOCK_NB)
        evaluate.tune_cached_stacked(list(zip(paths, small)), task, horizon)
    assert not paths[1].exists()  # another driver's: left to it
    assert common.load_json(paths[0])["stacked_with"] == 1


def test_stack_tunes_each_architecture_in_groups_of_at_most_stack_max(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    small = [elo.SmallFC(key=jax.random.key(k)) for k in range(3)]
    items = [("p0", small[0]), ("c", elo.Celo2(key=jax.random.key(0))), ("p1", small[1])]
    items.append(("p2", small[2]))
    groups = []
    monkeypatch.setattr(
        evaluate,
        "tune_cached_stacked",
        lambda group, task, horizon: groups.append([p.parent.name for p, _ in group]),
    )
    evaluate.tune_cells(items, tmp_path, [("t", 5)], stack=2)
    assert groups == [["p0", "p1"], ["p2"], ["c"]]
    monkeypatch.setattr(
        evaluate, "tune_cells", lambda items, out, cells, stack: groups.append(stack)
    )
    common.write_json(tmp_path / "main" / "pes_celo2" / "s0" / "meta.json", {})
    monkeypatch.setattr(evaluate.elo, "load_optimizer", lambda path: path.name)
    argv = ["evaluate", "runs", "--results-dir", str(tmp_path), "--stack"]
    for extra, stack in (([], 6), (["--stack-max", "3"], 3)):
        groups.clear()
        monkeypatch.setattr(sys, "argv", [*argv, *extra, "--checkpoints", "selected"])
        evaluate.main()
        assert groups == [stack]
    for bad in (["baselines", "--stack"], ["runs", "--stack", "--stack-max", "0"]):
        monkeypatch.setattr(sys, "argv", ["evaluate", *bad, "--results-dir", str(tmp_path)])
        with pytest.raises(SystemExit):
            evaluate.main()


def test_horizon_with_a_task_without_a_30k_cell_does_nothing(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    def refuse(*args):
        raise AssertionError("nothing should be loaded or tuned")

    monkeypatch.setattr(evaluate.elo, "load_optimizer", refuse)
    monkeypatch.setattr(evaluate, "tune_cached", refuse)
    evaluate.run_long_horizon(tmp_path, ["gru-h32_mnist-rows-8x8"])


def test_checkpoints_selected_evaluates_only_each_runs_selected_checkpoint(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    for arm in ("pes_celo2", "elo_celo2"):
        common.write_json(tmp_path / "main" / arm / "s0" / "meta.json", {})
    monkeypatch.setattr(evaluate.elo, "load_optimizer", lambda path: path.name)
    tuned = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, lo, *_: tuned.append((path, lo)))
    task = "gru-h32_mnist-rows-8x8"
    argv = ["evaluate", "runs", "--results-dir", str(tmp_path), "--task", task]
    monkeypatch.setattr(sys, "argv", [*argv, "--checkpoints", "selected"])
    evaluate.main()
    assert {lo for _, lo in tuned} == {"best_optimizer.eqx"}
    assert sorted(p.parent.relative_to(tmp_path / "evaluation" / "runs") for p, _ in tuned) == [
        Path("elo_celo2/s0/best"),
        Path("pes_celo2/s0/best"),
    ]
    tuned.clear()
    monkeypatch.setattr(sys, "argv", argv)  # default: both, the selected ones first
    evaluate.main()
    assert [lo for _, lo in tuned] == ["best_optimizer.eqx"] * 2 + ["final_optimizer.eqx"] * 2


def _horizon_result(path: Path, curve: list[float]) -> None:
    """An item-1 result at 30K steps whose chosen setting's test-loss curve is `curve`."""
    sweep = [{"value": 1.0, "validation_loss": 1.0, "test_loss": curve[-1]}]
    steps = [3000 * k for k in range(len(curve))]
    data = {"value": 1.0, "selected": 0, "test_loss": curve[-1], "diverged": False}
    common.write_json(path, data | {"sweep": sweep, "steps": steps, "test_loss_curve": curve})


def test_run_restricts_horizon_to_the_named_checkpoints_and_still_tunes_adamw(
    tmp_path, monkeypatch
):
    from studies.celo2_headline import evaluate

    every = evaluate.long_horizon_checkpoints(None)
    assert every[:6] == [(a, s) for s in (0, 1, 2) for a in ("pes", "elo")]  # seeds 0-2 first
    with pytest.raises(SystemExit, match="'pes/s9' is not a checkpoint of item 1"):
        evaluate.long_horizon_checkpoints(["pes/s9"])
    monkeypatch.setattr(evaluate.elo, "load_optimizer", lambda path: path)
    monkeypatch.setattr(evaluate, "SMALL_FC_STUDY", tmp_path)
    tuned = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, *_: tuned.append(path))
    task = settings.LONG_HORIZON_TASKS[1]
    evaluate.run_long_horizon(tmp_path, [task], only_runs=["elo/s3"])
    assert [p.relative_to(tmp_path) for p in tuned] == [
        Path(f"horizon/adamw/{task}@30000.json"),
        Path(f"horizon/elo_s3/{task}@30000.json"),
    ]


def test_added_tunes_the_baselines_and_selected_checkpoints_on_item_1s_cell_only(
    tmp_path, monkeypatch
):
    from studies.celo2_headline import evaluate

    fashion, cifar = settings.LONG_HORIZON_TASKS
    monkeypatch.setattr(sys, "argv", ["evaluate", "added", "--results-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="Item 1 is not decided"):
        evaluate.main()
    horizon = tmp_path / "evaluation" / "horizon"
    for task in (fashion, cifar):
        for seed in settings.LONG_HORIZON_SEEDS:
            _horizon_result(horizon / f"pes_s{seed}" / f"{task}@30000.json", [2.0, 1.0, 1.0])
    with pytest.raises(SystemExit, match="added no cell"):
        evaluate.main()
    for seed in range(3):  # PES rises late (+20%) on three checkpoints on Fashion-MNIST
        _horizon_result(horizon / f"pes_s{seed}" / f"{fashion}@30000.json", [2.0, 1.0, 1.2])
    common.write_json(tmp_path / "main" / "pes_celo2" / "s0" / "meta.json", {})
    monkeypatch.setattr(evaluate.elo, "load_optimizer", lambda path: path.name)
    tuned = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, lo, *_: tuned.append((path, lo)))
    evaluate.main()
    evaluation = tmp_path / "evaluation"
    assert [(p.relative_to(evaluation), lo) for p, lo in tuned] == [
        *((Path(f"baselines/{b}/{fashion}@30000.json"), b) for b in evaluate.BASELINES),
        (Path(f"runs/pes_celo2/s0/best/{fashion}@30000.json"), "best_optimizer.eqx"),
    ]
    monkeypatch.setattr(sys, "argv", [*sys.argv, "--task", fashion])
    with pytest.raises(SystemExit) as stopped:  # item 1 decides the cell
        evaluate.main()
    assert stopped.value.code == 2  # argparse's error: `--task does not apply to added`


def test_a_checkpoint_equal_to_an_earlier_one_is_tuned_once_and_its_results_copied(
    tmp_path, monkeypatch
):
    from studies.celo2_headline import evaluate

    first, other = (elo.SmallFC(key=jax.random.key(k)) for k in (0, 1))
    twin = elo.SmallFC(key=jax.random.key(0))  # another object with the same weights
    assert evaluate.same_weights(first, twin) and not evaluate.same_weights(first, other)
    items = [("pes/s1/best", first), ("pes/s2/best", other), ("elo/s1/best", twin)]
    tuned = []

    def fake_tune(path, lo, task, horizon):
        tuned.append(path.relative_to(tmp_path / "runs").as_posix())
        common.write_json(path, {"test_loss": float(len(tuned))})

    monkeypatch.setattr(evaluate, "tune_cached", fake_tune)
    cell_list = [("t", 5), ("u", 7)]
    evaluate.tune_cells(items, tmp_path / "runs", cell_list, stack=0)
    assert tuned == ["pes/s1/best/t@5.json", "pes/s1/best/u@7.json"] + [
        "pes/s2/best/t@5.json",
        "pes/s2/best/u@7.json",
    ]
    for cell, loss in (("t@5", 1.0), ("u@7", 2.0)):
        copied = common.load_json(tmp_path / "runs" / "elo/s1/best" / f"{cell}.json")
        assert copied == {
            "test_loss": loss,
            "copied_from": f"runs/pes/s1/best/{cell}.json",
            "copied_by": common.git_commit(),
        }
    common.write_json(tmp_path / "runs" / "elo/s1/best" / "t@5.json", {"own": True})
    evaluate.copy_to_twins(tmp_path / "runs", {"pes/s1/best": ["elo/s1/best"]}, cell_list)
    assert common.load_json(tmp_path / "runs" / "elo/s1/best" / "t@5.json") == {"own": True}


def test_tuning_twins_separately_gives_equal_results_so_one_tuning_serves_both(tmp_path):
    from studies.celo2_headline import evaluate

    twins = [elo.SmallFC(key=jax.random.key(5)) for _ in range(2)]  # two objects, equal weights
    paths = [tmp_path / f"{n}.json" for n in ("pes", "elo")]
    for path, lo in zip(paths, twins):
        evaluate.tune_cached(path, lo, "regression-mlp-w64-d2_teacher16", 4)
    pes, elo_ = (common.load_json(p) for p in paths)
    assert pes.pop("seconds") > 0 and elo_.pop("seconds") > 0
    for result in (pes, elo_):  # the machine's load when each was written (elo.environment)
        result["environment"].pop("load_average")
    assert pes == elo_  # bitwise: every sweep value's losses, the choice, the test loss


def test_added_reuses_item_1s_adamw_result_on_that_cell(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    fashion = settings.LONG_HORIZON_TASKS[0]
    out = tmp_path / "evaluation"
    common.write_json(out / "horizon" / "adamw" / f"{fashion}@30000.json", {"test_loss": 0.4})
    evaluate.reuse_item1_adamw(out, fashion, 30000)
    copied = common.load_json(out / "baselines" / "adamw" / f"{fashion}@30000.json")
    assert copied == {
        "test_loss": 0.4,
        "copied_from": f"horizon/adamw/{fashion}@30000.json",
        "copied_by": common.git_commit(),
    }
    common.write_json(out / "horizon" / "adamw" / f"{fashion}@30000.json", {"test_loss": 9.0})
    evaluate.reuse_item1_adamw(out, fashion, 30000)  # an existing result is never overwritten
    assert common.load_json(out / "baselines" / "adamw" / f"{fashion}@30000.json") == copied


def test_decayed_tunes_each_celo2_runs_selected_checkpoint_with_the_decayed_step(
    tmp_path, monkeypatch
):
    from studies.celo2_headline import evaluate

    for arm in ("pes_celo2", "elo_celo2", "pes_small_fc"):
        common.write_json(tmp_path / "main" / arm / "s1" / "meta.json", {})
    # Each run its own weights (equal ones would be twins, tuned once).
    checkpoints = {
        arm: elo.Celo2(key=jax.random.key(i)) for i, arm in enumerate(("pes_celo2", "elo_celo2"))
    }
    loaded = []
    monkeypatch.setattr(
        evaluate.elo,
        "load_optimizer",
        lambda path: loaded.append(path) or checkpoints[path.parent.parent.name],
    )
    tuned = []
    monkeypatch.setattr(
        evaluate, "tune_cached", lambda path, lo, *_, **kw: tuned.append((path, lo, kw))
    )
    task = "gru-h32_mnist-rows-8x8"
    argv = ["evaluate", "decayed", "--results-dir", str(tmp_path), "--task", task]
    monkeypatch.setattr(sys, "argv", argv)
    evaluate.main()
    assert {p.name for p in loaded} == {"best_optimizer.eqx"}
    assert sorted(p.relative_to(tmp_path / "evaluation" / "decayed") for p, _, _ in tuned) == [
        Path(f"elo_celo2/s1/best/{task}@2000.json"),
        Path(f"pes_celo2/s1/best/{task}@2000.json"),
    ]
    for path, lo, kw in tuned:
        assert (lo.init_lr, lo.end_lr, lo.warmup_fraction) == (0.0, 0.0, 0.05)
        arm = path.parents[2].name
        assert lo.w0 is checkpoints[arm].w0  # the checkpoint's weights, unchanged
        assert kw == {"required": {"lo_schedule": settings.DECAYED_SCHEDULE}}
    with pytest.raises(SystemExit, match="Celo2 checkpoints"):
        evaluate.decayed(elo.SmallFC(key=jax.random.key(0)))


@pytest.mark.parametrize("command", ["runs", "decayed"])
def test_run_restricts_runs_and_decayed_to_the_named_main_runs(tmp_path, monkeypatch, command):
    from studies.celo2_headline import evaluate

    for arm in ("pes_celo2", "elo_celo2"):
        for seed in (0, 1):
            common.write_json(tmp_path / "main" / arm / f"s{seed}" / "meta.json", {})
    # Each run its own weights (equal ones would be twins, tuned once).
    loaded = {}
    monkeypatch.setattr(
        evaluate.elo,
        "load_optimizer",
        lambda path: loaded.setdefault(path, elo.Celo2(key=jax.random.key(len(loaded)))),
    )
    tuned = []
    monkeypatch.setattr(evaluate, "tune_cached", lambda path, *_, **kw: tuned.append(path))
    task = "gru-h32_mnist-rows-8x8"
    argv = ["evaluate", command, "--results-dir", str(tmp_path), "--task", task]
    selected = ["--checkpoints", "selected"] if command == "runs" else []
    monkeypatch.setattr(sys, "argv", [*argv, *selected, "--run", "pes_celo2/s1"])
    evaluate.main()
    assert [p.parent.relative_to(tmp_path / "evaluation" / command) for p in tuned] == [
        Path("pes_celo2/s1/best")
    ]
    monkeypatch.setattr(sys, "argv", [*argv, "--run", "pes_celo2/s7"])
    with pytest.raises(SystemExit, match=r"'pes_celo2/s7': not a summarised main run of"):
        evaluate.main()


def test_resumable_tuning_keeps_each_value_in_a_cache_out_of_git(tmp_path, monkeypatch):
    """`evaluate.py --resumable`: `elo.tune` gets a `TuningCache` per cell, under the root the
    flag sets."""
    from studies.celo2_headline import evaluate

    seen = {}

    def fake_tune(optimizer, task, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(elo, "tune", fake_tune)
    monkeypatch.setattr(evaluate, "TUNING_CACHE_ROOT", tmp_path / "cache")
    cell = "gru-h32_mnist-rows-8x8@2000"
    for where in ("shipped/celo2_published", "runs/pes_celo2/s0/best", "decayed/elo_celo2/s0/best"):
        path = tmp_path / "evaluation" / where / f"{cell}.json"
        with pytest.raises(RuntimeError, match="stop here"):
            evaluate.tune_cached(path, "adamw", "gru-h32_mnist-rows-8x8", 2000)
        cache = seen["cache"]
        assert isinstance(cache, elo.TuningCache)
        # Each result its own directory: two arms' seed 0 never share one.
        assert Path(cache.directory) == tmp_path / "cache" / where / cell


def test_a_resumable_cells_values_are_removed_once_it_is_written(tmp_path, monkeypatch):
    from studies.celo2_headline import evaluate

    monkeypatch.setattr(evaluate, "TUNING_CACHE_ROOT", tmp_path / "cache")
    path = tmp_path / "evaluation" / "baselines" / "adamw" / "quadratic@4.json"
    left = evaluate.tuning_cache_dir(path)
    left.mkdir(parents=True)
    (left / "value_0.1.json").write_text("{}")

    def fake_cached(path, compute, required=None, log=None):
        common.write_json(path, {"made": True})
        return True

    monkeypatch.setattr(evaluate.cells_cache, "cached", fake_cached)
    evaluate.tune_cached(path, "adamw", "quadratic-d4", 4)
    assert common.load_json(path) == {"made": True} and not left.exists()
