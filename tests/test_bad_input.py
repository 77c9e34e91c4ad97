"""Bad inputs get one clear line, nothing is lost, nothing is silent (issue 25).

Each test failed before its fix: a traceback, a silent acceptance, a lost result or a wrong
message.
"""

import errno
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import elo
import elo.cli
from elo._checks import check_key
from elo._runtime._cpu import available_cores
from elo.cli import main

from .helpers import tiny_cli_args


TINY = tiny_cli_args()
ROOT = Path(__file__).resolve().parent.parent


def _one_error_line(capsys, code: int) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("elo: error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


# ------------------------------------------------------------------------------------------------
# CLI conventions


def test_version_prints_the_package_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"elo {elo.__version__}\n"


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["meta-train"],
            "elo: error: the following arguments are required: --preset "
            "(see 'elo meta-train --help')\n",
        ),
        ([], "elo: error: the following arguments are required: COMMAND (see 'elo --help')\n"),
    ],
)
def test_usage_errors_carry_the_prefix_once(argv, expected, capsys):
    assert _one_error_line(capsys, main(argv)) == expected


def test_evaluate_help_names_pretrained_targets_and_the_tasks(capsys):
    assert main(["evaluate", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "pretrained:NAME" in out and "small_fc_mnist8" in out
    assert all(name in out for name in elo.tasks.list_tasks())
    assert "elo.tasks.list_tasks()" in out


# ------------------------------------------------------------------------------------------------
# meta-train


@pytest.mark.parametrize("seed", [str(10**23), "-1", str(2**32)])
def test_a_seed_out_of_range_is_one_line_and_creates_nothing(seed, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["meta-train", *TINY, "--steps", "1", "--seed", seed, "--out", str(out)])
    err = _one_error_line(capsys, code)
    assert f"--seed must be an integer from 0 to 4294967295, got {seed}" in err
    assert not out.exists()


def test_more_cpu_devices_than_cores_is_refused(tmp_path, capsys):
    cores = available_cores()
    args = ["meta-train", *TINY, "--steps", "1", "--cpu-devices", str(cores + 1)]
    args += ["--out", str(tmp_path / "r")]
    err = _one_error_line(capsys, main(args))
    assert f"--cpu-devices {cores + 1} is more than the {cores} CPU cores" in err


def test_more_cpu_devices_than_cores_is_refused_in_a_fresh_process(tmp_path):
    # Without the suite's XLA_FLAGS, which would refuse any other count for another reason.
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    out = tmp_path / "r"
    args = ["meta-train", "--preset", "pes_small_fc", "--steps", "1", "--cpu-devices", "99"]
    args += ["--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "elo.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("elo: error: --cpu-devices 99 is more than the ")
    assert result.stderr.count("\n") == 1
    assert not out.exists()


def test_a_truncation_longer_than_every_horizon_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="truncation_length = 101 is invalid: it must be at most "):
        elo.presets.pes_small_fc(truncation_length=101, min_horizon=10, max_horizon=100)
    elo.presets.pes_small_fc(truncation_length=100, min_horizon=10, max_horizon=100)
    out = tmp_path / "run"
    args = ["--set", "truncation_length=11", "--steps", "1", "--out", str(out)]
    code = main(["meta-train", *TINY, *args])
    err = _one_error_line(capsys, code)
    assert "at most max_horizon = 10" in err and "raise max_horizon" in err
    assert not out.exists()


@pytest.mark.slow
def test_a_failure_inside_the_run_directory_leaves_no_lock_behind(tmp_path, capsys):
    typo = [a.replace("mnist", "mnsit") for a in TINY]
    new = tmp_path / "new"
    assert main(["meta-train", *typo, "--steps", "2", "--out", str(new)]) == 2
    assert not new.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["meta-train", *typo, "--steps", "2", "--out", str(empty)]) == 2
    assert list(empty.iterdir()) == []  # the user's directory stays, without a lock file
    assert "mnsit" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# plot


def test_plot_refuses_a_negative_smoothing_window(capsys):
    err = _one_error_line(capsys, main(["plot", "--smooth", "-3", "/no/such/run"]))
    assert "--smooth must be 0 (automatic), 1 (none) or a larger window, got -3" in err


def _evaluation(task: str, name: str, scale: float) -> "elo.Evaluation":
    curve = scale * np.array([[1.0, 0.6, 0.4]])
    return elo.Evaluation(
        name=name,
        task=task,
        num_steps=10,
        eval_every=5,
        seeds=(0,),
        learning_rate=None,
        steps=np.array([0, 5, 10]),
        minibatch_loss=scale * np.linspace(1.0, 0.4, 10)[None],
        train_loss=curve,
        train_accuracy=curve / 2,
        validation_loss=curve,
        validation_accuracy=curve / 2,
        test_loss=curve,
        test_accuracy=curve / 2,
    )


def test_plot_draws_each_task_on_its_own_row_of_panels(tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    from elo.cli._evaluate import evaluation_document

    paths = []
    for task, name, scale in [("t1", "a", 1.0), ("t2", "b", 10.0), ("t1", "c", 2.0)]:
        paths.append(tmp_path / f"{task}-{name}.json")
        document = evaluation_document(name, _evaluation(task, name, scale))
        paths[-1].write_text(json.dumps(document, allow_nan=False))
    figures = []
    save = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k))
    )
    assert main(["plot", *map(str, paths), "--out", str(tmp_path / "eval.png")]) == 0
    (figure,) = figures
    assert len(figure.axes) == 6  # two tasks, three panels each
    rows = {}
    for ax in figure.axes:
        task = ax.get_title().split(":")[0]
        rows.setdefault(task, set()).update(line.get_label() for line in ax.lines)
    assert rows == {"t1": {"a", "c"}, "t2": {"b"}}


def test_plot_reports_broken_metrics_lines_and_names_the_file_it_writes(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        json.dumps({"step": t, "meta_loss": 1.0 / t, "max_inner_step": 10 * t, "alpha": 0.0})
        for t in range(1, 5)
    ]
    lines.insert(2, '{"step": 3, "meta_lo')  # a line damaged in the middle of the file
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["plot", str(run), "--out", str(tmp_path / "figure")]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"elo: warning: {run / 'metrics.jsonl'}: 1 unreadable line (3) left out of the plot.\n"
    )
    assert captured.out == f"wrote {tmp_path / 'figure.png'}\n"
    assert (tmp_path / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "figure").exists()


# ------------------------------------------------------------------------------------------------
# evaluate --out

EVALUATE = ["sgd", "--lr", "0.1", "--task", "mlp-w8-d1_mnist-8x8x1", "--steps", "6"]
EVALUATE += ["--eval-every", "3", "--seeds", "2", "--batch-size", "16"]


def test_an_unwritable_out_is_refused_before_training(tmp_path, monkeypatch, capsys):
    def no_training(*args, **kwargs):
        raise AssertionError("trained although the result could not be written")

    monkeypatch.setattr(elo.cli._evaluate, "evaluate", no_training)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    out = a_file / "sub" / "result.json"
    err = _one_error_line(capsys, main(["evaluate", *EVALUATE, "--out", str(out)]))
    assert err == f"elo: error: --out {out}: {a_file} is not a directory; choose another --out.\n"
    err = _one_error_line(capsys, main(["evaluate", *EVALUATE, "--out", str(tmp_path)]))
    assert f"--out {tmp_path} is a directory; give a file name" in err


@pytest.mark.slow
def test_a_result_that_cannot_be_written_is_kept(tmp_path, monkeypatch, capsys):
    def disk_full(path, parts):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(elo.cli._evaluate, "atomic_write", disk_full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = tmp_path / "result.json"
    err = _one_error_line(capsys, main(["evaluate", *EVALUATE, "--out", str(out)]))
    match = re.fullmatch(
        rf"elo: error: could not write {re.escape(str(out))} \(No space left on device\); "
        r"the result is kept in (\S+)\.\n",
        err,
    )
    assert match, err
    kept = Path(match[1])
    assert kept.parent == tmp_path / "tmp"
    document = json.loads(kept.read_text())
    assert document["format"] == "elo-evaluation" and document["steps"] == [0, 3, 6]


# ------------------------------------------------------------------------------------------------
# The API


@pytest.mark.parametrize("num_steps", [2**31, 10**20])
def test_as_optax_refuses_a_run_longer_than_its_step_counter(num_steps):
    lo = elo.SmallFC(key=jax.random.key(0))
    with pytest.raises(ValueError, match="at most 2147483647"):
        elo.as_optax(lo, num_steps=num_steps)
    with pytest.raises(ValueError, match="SmallFC.init: num_steps = .* below 2[*][*]31"):
        lo.init({"w": jnp.zeros(3)}, num_steps)
    state = elo.as_optax(lo, num_steps=2**31 - 1).init({"w": jnp.zeros(3)})
    assert int(state.num_steps) == 2**31 - 1


@pytest.mark.slow
def test_init_and_meta_step_say_they_expect_a_prng_key():
    # In a fresh interpreter: under pytest the jaxtyping hook would reject the calls first.
    code = """
import jax, elo
config = elo.presets.pes_small_fc(
    tasks=("quadratic-d10",), num_particles=2, truncation_length=3, min_horizon=5,
    max_horizon=10, initial_step_offset=2, num_outer_steps=2,
)
for call in (
    lambda: elo.init(config, key=0),
    lambda: elo.meta_step(elo.init(config, key=jax.random.key(0)), 3),
):
    try:
        call()
    except TypeError as e:
        print(e)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.splitlines() == [
        "elo.init: `key` must be a JAX PRNG key, e.g. jax.random.key(0) (one key, not a "
        "batch); got 0.",
        "elo.meta_step: `key` must be a JAX PRNG key, e.g. jax.random.key(0) (one key, not a "
        "batch); got 3.",
    ], result.stderr


def test_check_key_accepts_typed_and_legacy_keys_only():
    check_key(jax.random.key(0), "f")
    check_key(jax.random.PRNGKey(0), "f")
    for bad in (jax.random.split(jax.random.key(0)), jnp.zeros(2, jnp.int32), None):
        with pytest.raises(TypeError, match="f: `key` must be a JAX PRNG key"):
            check_key(bad, "f")


def _problem():
    params = {"w": jax.random.normal(jax.random.key(0), (16, 8)), "b": jnp.zeros(8)}
    grads = jax.tree.map(lambda x: 0.1 * jax.random.normal(jax.random.key(1), x.shape), params)
    return params, grads


@pytest.mark.slow
def test_past_num_steps_a_learned_optimizer_repeats_its_last_scheduled_update():
    lo = elo.pretrained("small_fc_mnist8")
    params, grads = _problem()
    num_steps = 100
    opt = elo.as_optax(lo, num_steps=num_steps, after_end="stop")
    state = opt.init(params)
    for _ in range(5):
        _, state = opt.update(grads, state, params)
    at = lambda t: eqx.tree_at(lambda s: s.iteration, state, jnp.int32(t))  # noqa: E731
    last, _ = opt.update(grads, at(num_steps - 1), params)
    for later in (num_steps, 3 * num_steps, 10**5):
        updates, new_state = opt.update(grads, at(later), params)
        assert eqx.tree_equal(updates, last), later
        assert int(new_state.iteration) == later + 1  # the counter itself goes on
    # Before the end the time features do matter.
    earlier, _ = opt.update(grads, at(10), params)
    assert not eqx.tree_equal(earlier, last)
    # The learned optimizer itself keeps its step: meta-training's inner problems, which the
    # resume buffer carries past their horizon, see their own time (the golden runs pin this).
    beyond, _ = lo.update(grads, at(3 * num_steps), params)
    assert not eqx.tree_equal(beyond, last)


@pytest.mark.slow
def test_as_optax_passes_a_nan_gradient_through_to_the_update():
    lo = elo.pretrained("small_fc_mnist8")
    params, grads = _problem()
    grads["w"] = grads["w"].at[2, 3].set(jnp.nan)
    opt = elo.as_optax(lo, num_steps=10)
    updates, state = opt.update(grads, opt.init(params), params)
    w = np.array(updates["w"])
    assert np.isnan(w[2, 3])
    w[2, 3] = 0.0
    assert np.isfinite(w).all() and np.isfinite(np.asarray(updates["b"])).all()
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(state))
    # optax.apply_if_finite skips such a step and keeps the state as it was.
    guarded = optax.apply_if_finite(opt, max_consecutive_errors=3)
    guarded_state = guarded.init(params)
    updates, new_state = guarded.update(grads, guarded_state, params)
    assert all(np.all(np.asarray(u) == 0) for u in jax.tree.leaves(updates))
    assert int(new_state.notfinite_count) == 1
    assert eqx.tree_equal(new_state.inner_state, guarded_state.inner_state)


# ------------------------------------------------------------------------------------------------
# Texts that point elsewhere


def test_setup_sh_usage_cites_sections_that_exist():
    text = (ROOT / "benchmarks/reference/setup.sh").read_text()
    citations = re.findall(r'"([^"]+)" in ([\w/-]+(?:\.\w+)?)', text)
    assert citations
    for section, page in citations:
        headings = [
            line.lstrip("#").strip()
            for line in (ROOT / page).read_text().splitlines()
            if line.startswith("#")
        ]
        assert section in headings, (section, page)


def test_evaluate_lr_of_a_learned_optimizer_says_how_to_set_its_multiplier(capsys):
    args = ["--task", "quadratic-d4", "--steps", "5", "--lr", "2"]
    err = _one_error_line(capsys, main(["evaluate", "pretrained:small_fc_mnist8", *args]))
    assert "--lr and --lr-sweep apply to hand-designed optimizers only" in err
    assert "--baselines adamw --sweep N tunes it" in err
    assert "elo.evaluate(elo.as_optax(lo, num_steps=N, learning_rate=M), task, num_steps=N)" in err
    # The call it names runs.
    lo = elo.pretrained("small_fc_mnist8")
    opt = elo.as_optax(lo, num_steps=5, learning_rate=2.0)
    result = elo.evaluate(opt, "quadratic-d4", num_steps=5, eval_every=5)
    assert np.isfinite(result.final("test_loss")[0])


@pytest.mark.slow
def test_evaluate_lr_sweep_selected_on_validation_writes_its_result(tmp_path):
    out = tmp_path / "sweep.json"
    argv = ["evaluate", "adamw", "--task", "quadratic-d4", "--steps", "4", "--lr-sweep"]
    argv += ["--lr-num", "2", "--select", "validation_loss", "--out", str(out)]
    assert main(argv) == 0
    document = json.loads(out.read_text())
    assert document["select"] == "validation_loss" and len(document["sweep"]) == 2


def test_validate_task_without_validation_is_refused(tmp_path, capsys):
    argv = ["meta-train", "--preset", "pes_small_fc_cpu", "--steps", "1", "--out", str(tmp_path)]
    argv += ["--validate-task", "quadratic-d4", "--validate-every", "0"]
    assert main(argv) == 2
    assert "--validate-every 0 turns validation off" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "x", "1.5", ""])
def test_a_bad_validate_every_is_refused(tmp_path, capsys, value):
    argv = ["meta-train", "--preset", "pes_small_fc_cpu", "--steps", "1", "--out", str(tmp_path)]
    assert main([*argv, "--validate-every", value]) == 2
    assert "--validate-every must be 'auto', 0 or positive" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-1", "x", "", "1,,10", "nan"])
def test_bad_validate_scales_are_refused(tmp_path, capsys, value):
    argv = ["meta-train", "--preset", "pes_small_fc_cpu", "--steps", "1", "--out", str(tmp_path)]
    assert main([*argv, "--validate-scales", value]) == 2
    assert "--validate-scales takes positive numbers" in capsys.readouterr().err
    assert not (tmp_path / "config.json").exists()


def test_validate_scales_without_validation_is_refused(tmp_path, capsys):
    argv = ["meta-train", "--preset", "pes_small_fc_cpu", "--steps", "1", "--out", str(tmp_path)]
    assert main([*argv, "--validate-scales", "1", "--validate-every", "0"]) == 2
    assert "--validate-scales applies only when the run validates" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# presets


@pytest.mark.parametrize("preset", sorted(elo.presets.PRESETS))
def test_presets_suggest_the_field_for_a_misspelt_keyword(preset):
    with pytest.raises(
        TypeError,
        match=r"^An elo preset got an unexpected keyword argument 'num_partciles'; did you mean "
        r"'num_particles'\? The presets take elo\.MetaConfig fields",
    ):
        elo.presets.PRESETS[preset](num_partciles=4)
    with pytest.raises(TypeError, match=r"argument 'zzz'; it is no MetaConfig field\."):
        elo.presets.get_preset(preset, zzz=1)
