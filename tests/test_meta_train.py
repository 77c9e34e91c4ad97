"""`elo.meta_train`: the resumable run as a Python function (the CLI's tests cover the rest)."""

import json
import math

import jax
import pytest

import elo
import elo._run._meta_train

from .helpers import bitwise_equal, tiny_config, TINY_ELO_FIELDS, without_runtime_type_checks


STEPS = 4


def _steps(out) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in elo.read_metrics(out)]


@pytest.mark.slow
def test_an_interrupted_run_resumes_bit_for_bit(tmp_path, monkeypatch):
    config = tiny_config(num_outer_steps=STEPS)
    straight = elo.meta_train(
        config, tmp_path / "straight", seed=1, checkpoint_every=1, progress=False
    )
    assert int(straight.step) == STEPS

    out = tmp_path / "cut"
    real_step = elo._run._meta_train.meta_step

    def interrupted_step(state, key):
        if int(state.step) == 2:
            raise KeyboardInterrupt
        return real_step(state, key)

    monkeypatch.setattr(elo._run._meta_train, "meta_step", interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        elo.meta_train(config, out, seed=1, checkpoint_every=3, progress=False)
    assert [r["step"] for r in elo.read_metrics(out)] == [1, 2]
    monkeypatch.setattr(elo._run._meta_train, "meta_step", real_step)
    resumed = elo.meta_train(config, out, seed=1, checkpoint_every=3, progress=False)
    assert bitwise_equal(resumed, straight)
    assert _steps(out) == _steps(tmp_path / "straight")
    assert [s["from_step"] for s in elo.read_sessions(out)] == [0, 2]
    assert elo.read_sessions(out)[0]["options"]["seed"] == 1
    # A complete run returns its checkpoint without training.
    again = elo.meta_train(config, out, seed=1, checkpoint_every=3, progress=False)
    assert bitwise_equal(again, straight)
    saved = json.loads((out / "config.json").read_text())
    assert saved["seed"] == 1 and saved["config"] == config.to_dict()


@pytest.mark.slow
def test_a_second_run_on_the_same_directory_is_refused(tmp_path, monkeypatch):
    config = tiny_config(num_outer_steps=2)
    out = tmp_path / "shared"
    real_step = elo._run._meta_train.meta_step
    refused = []

    def step_with_a_second_run_alongside(state, key):
        if not refused:
            with pytest.raises(elo.RunDirError, match="is in use by another meta-training run"):
                elo.meta_train(config, out, seed=0, checkpoint_every=1, progress=False)
            refused.append(True)
        return real_step(state, key)

    monkeypatch.setattr(elo._run._meta_train, "meta_step", step_with_a_second_run_alongside)
    state = elo.meta_train(config, out, seed=0, checkpoint_every=1, progress=False)
    assert refused == [True] and int(state.step) == 2


def test_another_run_in_the_directory_is_refused_with_the_fix(tmp_path):
    # The quadratic tiny run of test_checkpoint.py: the fast lane compiles its step once.
    config = tiny_config(tasks=("quadratic-d4",))
    out = tmp_path / "run"
    elo.meta_train(config, out, seed=0, checkpoint_every=4, progress=False)
    with pytest.raises(elo.RunDirError, match="cannot be extended.*init_from"):
        elo.meta_train(
            config.replace(num_outer_steps=9), out, seed=0, checkpoint_every=4, progress=False
        )
    with pytest.raises(elo.RunDirError, match="seed: 0 .run directory. vs 5"):
        elo.meta_train(config, out, seed=5, checkpoint_every=4, progress=False)
    assert issubclass(elo.RunDirError, ValueError)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(seed=-1, checkpoint_every=1), "seed = -1 is invalid"),
        (dict(seed=0, checkpoint_every=0), "checkpoint_every = 0 is invalid"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        elo.meta_train(tiny_config(), tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_progress_shows_alpha_its_phase_and_validation_and_ends_with_a_summary(tmp_path, capsys):
    config = tiny_config(num_outer_steps=STEPS)
    out = tmp_path / "run"
    validation = elo.ValidationSettings(2, num_steps=3)
    elo.meta_train(config, out, seed=1, checkpoint_every=3, validation=validation)
    captured = capsys.readouterr()
    scores = [r["validation"]["score"] for r in elo.read_validation(out)]
    assert len(scores) == 3  # steps 0, 2 and 4
    assert f"alpha=1.00 alone, val={scores[-1]:.4g} best={min(scores):.4g}" in captured.err
    assert "Validating the initial learned optimizer" in captured.err
    assert "Phase reached: alone (no expert: the learned optimizer alone" in captured.out
    assert "Validation score of the learned optimizer alone" in captured.out
    chosen = out / "best_optimizer.eqx"
    command = f"elo evaluate {chosen} --task mlp-w32-d1_mnist-8x8x1 --steps 10 --baselines adamw"
    assert captured.out.splitlines()[-1] == f"  {command}"
    # Without progress: no bar and no summary, only the line that says the run is complete.
    elo.meta_train(config, out, seed=1, checkpoint_every=3, validation=validation, progress=False)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.count("\n") == 1


def test_the_phase_follows_alpha_and_the_supervision():
    from elo._run._report import progress_postfix, supervision_phase

    elo_config = tiny_config(**TINY_ELO_FIELDS)
    alphas = (0.0, 1e-4, 0.5, 1 - 1e-4, 1.0)
    expected = ["imitation", "fused", "fused", "fused", "alone"]
    assert [supervision_phase(elo_config, a) for a in alphas] == expected
    assert supervision_phase(tiny_config(), 1.0) == "alone"  # no expert
    cl = tiny_config(**TINY_ELO_FIELDS, supervision="alternating")
    assert {supervision_phase(cl, a) for a in alphas} == {"alternating"}
    # A fused alpha is never shown as 0 or 1.
    shown = [progress_postfix(elo_config, dict(alpha=a, meta_loss=0.5), None) for a in alphas]
    assert shown == [
        "alpha=0.00 imitation, meta_loss=0.5000",
        "alpha=0.0001 fused, meta_loss=0.5000",
        "alpha=0.50 fused, meta_loss=0.5000",
        "alpha=0.9999 fused, meta_loss=0.5000",
        "alpha=1.00 alone, meta_loss=0.5000",
    ]
    with_scores = progress_postfix(elo_config, dict(alpha=1.0, meta_loss=2.2), (0.61234, 0.587))
    assert with_scores == "alpha=1.00 alone, val=0.6123 best=0.587, meta_loss=2.2000"


def test_validation_settings_check_their_numbers():
    with pytest.raises(ValueError, match="every = 0 is invalid"):
        elo.ValidationSettings(0)
    assert elo.ValidationSettings(5).num_steps == 2000
    assert elo.ValidationSettings(5).scales == (0.1, 1.0, 10.0)
    for scales in ((), (0.0,), (1.0, -1.0), (math.inf,)):
        with pytest.raises(ValueError, match="scales = .* is invalid"):
            elo.ValidationSettings(5, scales=scales)
    assert elo.ValidationSettings(5, scales=[2.0]).scales == (2.0,)
    with without_runtime_type_checks():  # what users without the type checker see
        for scales in ("1", 1.0, ("a",)):
            with pytest.raises(ValueError, match="scales = .* is invalid"):
                elo.ValidationSettings(5, scales=scales)  # type: ignore[arg-type]


def test_a_check_trains_at_the_settings_scales_and_records_them(tmp_path):
    from elo._run._validator import Validator

    state = elo.init(tiny_config(tasks=("quadratic-d4",)), key=jax.random.key(0))
    tasks = (elo.tasks.get_task("quadratic-d4"), elo.tasks.get_task("quadratic-d4"))
    settings = elo.ValidationSettings(1, num_steps=3, tasks=tasks, scales=(1.0,))
    Validator(tmp_path, settings)(state, 0)
    (record,) = elo.read_validation(tmp_path / "metrics.jsonl")
    assert record["validation"]["scales"] == [1.0]
    assert all(
        len(t["losses"]) == 1 and t["scales"] == [1.0] for t in record["validation"]["per_task"]
    )
    # Resumed with the same checks: fine; with checks made otherwise: refused, saying how.
    Validator(tmp_path, settings)
    other = elo.ValidationSettings(1, num_steps=3, tasks=tasks)
    with pytest.raises(ValueError, match=r"scales: \[1.0\] there, \[0.1, 1.0, 10.0\] now"):
        Validator(tmp_path, other)(state, 1)
    longer = Validator(tmp_path, elo.ValidationSettings(1, num_steps=4, tasks=tasks, scales=(1.0,)))
    with pytest.raises(ValueError, match="num_steps: 3 there, 4 now"):
        longer.require_comparable()


def test_the_environment_has_one_vocabulary():
    env = elo.environment()
    assert env["backend"] == jax.default_backend() and env["device_count"] == jax.device_count()
    assert {"os", "cpu_model", "elo", "jax"} <= set(env) and "platform" not in env
    json.dumps(env, allow_nan=False)
