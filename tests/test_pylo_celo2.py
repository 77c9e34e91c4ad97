"""The Celo2 authors' published optimizer: PyLO's `celo2` branch's weights (`.pt`), the authors'
`theta.state`, the safe readers of both formats, and equality with PyLO's own `Celo2_naive`
on vectors made with it (`tests/parity/pylo_celo2/`, `generate.py` there)."""

import json
import pickle
import zipfile
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import elo
from elo._files._flax_msgpack import read_flax_msgpack
from elo._files._framing import CheckpointError
from elo._files._torch_state_dict import read_torch_state_dict


PARITY = Path(__file__).parent / "parity" / "pylo_celo2"
PUBLISHED = Path(__file__).parent / "parity" / "pylo_celo2" / "celo2_weights.pt"
CASES = ["pylo_celo2_defaults", "pylo_celo2_weight_decay", "pylo_celo2_embedding"]


def _case(name):
    record = json.loads((PARITY / f"{name}.json").read_text())
    arrays = dict(np.load(PARITY / f"{name}.npz"))
    return record, arrays


def _params(record, arrays, prefix):
    # A list keeps PyLO's parameter order as the flatten order (a dict would sort the names),
    # and each entry's key carries the name, so that "embed" is in the path.
    return [{name: jnp.asarray(arrays[f"{prefix}/{name}"])} for name in record["param_order"]]


def _trajectory(lo, record, arrays):
    """The parameters after each of the case's steps of `as_optax(lo)`, fed the case's
    gradients."""
    params = _params(record, arrays, "init")
    opt = elo.as_optax(lo, num_steps=1000)
    state = opt.init(params)
    update = jax.jit(opt.update)
    out = []
    for t in range(record["steps"]):
        grads = [{name: jnp.asarray(arrays[f"grads/{name}"][t])} for name in record["param_order"]]
        updates, state = update(grads, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
        out.append({name: np.asarray(v) for entry in params for name, v in entry.items()})
    return out


@pytest.mark.parametrize(
    "case",
    # PyLO's defaults in the fast lane; its other settings are slow.
    [pytest.param(c, marks=() if c == "pylo_celo2_defaults" else pytest.mark.slow) for c in CASES],
)
def test_elo_celo2_equals_pylos_celo2_naive(case):
    """Six steps of `import_pylo(celo2_weights.pt, optimizer_config=<the case's Celo2_naive
    keywords>)` through `as_optax` reproduce PyLO's parameters after every step: matrices (the
    AdamW-routed first and last, the learned ones), vectors, a conv kernel, an embedding, weight
    decay, and one gradient entry past the ±1000 clip."""
    record, arrays = _case(case)
    lo = elo.import_pylo(PUBLISHED, optimizer_config=record["kwargs"])
    routes = jax.tree.leaves(lo.imitation_leaves(_params(record, arrays, "init")))
    assert [not learned for learned in routes] == [
        record["pylo_is_adamw"][name] for name in record["param_order"]
    ]
    for t, params in enumerate(_trajectory(lo, record, arrays)):
        for name, value in params.items():
            # Float32 round-off of the same formulas computed by PyTorch and XLA (different
            # summation orders in the MLP, Newton-Schulz and the RMS norms), accumulated over
            # up to six steps of size lr <= 1e-2 on parameters of order 1: the largest
            # difference measured was below 1e-6. A wrong routing, clip or decay order moves a
            # parameter by far more (test_each_setting_of_pylo_moves_the_trajectory).
            np.testing.assert_allclose(
                value, arrays[f"params/{name}"][t], rtol=1e-6, atol=2e-7, err_msg=f"{name} {t}"
            )


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [{"decay_after_step": False}, {"grad_clip_value": None}, {"adam_for_input_output": False}],
)
def test_each_setting_of_pylo_moves_the_trajectory(change):
    """The parity above can fail: each of PyLO's settings, changed alone, moves the trajectory
    by far more than its tolerance."""
    record, arrays = _case("pylo_celo2_weight_decay")
    lo = elo.import_pylo(PUBLISHED, optimizer_config=record["kwargs"]).with_hyperparameters(
        **change
    )
    final = _trajectory(lo, record, arrays)[-1]
    deviation = [
        np.abs(v - arrays[f"params/{k}"][-1]) - 1e-6 * np.abs(arrays[f"params/{k}"][-1])
        for k, v in final.items()
    ]
    # Past the parity test's tolerance (atol 2e-7 beside rtol 1e-6) by a factor of 10 at least.
    assert max(float(np.max(d)) for d in deviation) > 10 * 2e-7


def test_theta_state_and_pt_give_the_same_optimizer():
    """The authors' flax `theta.state` (written by flax itself, `generate.py`) and PyLO's
    converted `.pt` hold the same network; both import as PyLO's `Celo2_naive`."""
    from_pt = elo.import_pylo(PUBLISHED)
    from_flax = elo.import_pylo(PARITY / "theta.state")
    assert eqx.tree_equal(from_pt, from_flax)
    assert from_pt.adam_for_input_output and from_pt.decay_after_step
    assert from_pt.grad_clip_value == 1000.0 and from_pt.adam_lr_mult == 1.0
    assert not from_pt.clip_grad


def test_a_directory_holding_theta_state_imports(tmp_path):
    (tmp_path / "theta.state").write_bytes((PARITY / "theta.state").read_bytes())
    assert eqx.tree_equal(elo.import_pylo(tmp_path), elo.import_pylo(PUBLISHED))


def test_celo2_published_ships_offline_with_its_licence_and_provenance():
    lo = elo.pretrained("celo2_published")
    assert eqx.tree_equal(
        lo,
        elo.import_pylo(PUBLISHED).with_hyperparameters(
            **elo.available_pretrained()["celo2_published"]["schedule"]["hyperparameters"]
        ),
    )
    record = elo.available_pretrained()["celo2_published"]
    assert record["source"]["sha256"] == (
        "eda7504f89616e60036c49aa1cf7b7d7a7212d5dfecdca3679249843268b8979"
    )
    licence = (Path(elo.__file__).parent / "pretrained" / "celo2_published.LICENSE").read_text()
    assert "BSD" in licence or "Redistribution and use" in licence


def test_the_torch_reader_reads_the_published_file_exactly():
    tensors = read_torch_state_dict(PUBLISHED)
    assert list(tensors)[:2] == ["first_layer_weights.0", "first_layer_weights.1"]
    assert tensors["first_layer_weights.3"].shape == (8, 3)
    assert tensors["output.weight"].shape == (3, 8)
    flax = read_flax_msgpack(PARITY / "theta.state")["ff_mod_stack"]["~"]
    np.testing.assert_array_equal(flax["w0__13"], tensors["first_layer_weights.13"].T)
    np.testing.assert_array_equal(flax["b2"], tensors["output.bias"])


class _Boom:
    def __reduce__(self):
        return (print, ("this must never run",))


def _with_pickle(tmp_path, payload: bytes) -> Path:
    """A copy of the published file whose data.pkl is `payload`."""
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(PUBLISHED) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = payload if item.filename.endswith("data.pkl") else src.read(item)
            dst.writestr(item, data)
    return path


def test_a_malicious_pickle_is_refused_before_anything_runs(tmp_path, capsys):
    path = _with_pickle(tmp_path, pickle.dumps({"w": _Boom()}, protocol=2))
    with pytest.raises(CheckpointError, match=r"print, which is neither a tensor"):
        elo.import_pylo(path)
    assert "must never run" not in capsys.readouterr().out
    path = _with_pickle(tmp_path, b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(CheckpointError, match=r"os\.system"):
        read_torch_state_dict(path)


def test_broken_files_are_refused_with_the_reason(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        read_torch_state_dict(tmp_path / "missing.pt")
    (tmp_path / "legacy.pt").write_bytes(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.")
    with pytest.raises(CheckpointError, match="not a PyTorch zip archive"):
        read_torch_state_dict(tmp_path / "legacy.pt")
    path = _with_pickle(tmp_path, pickle.dumps([1, 2], protocol=2))
    with pytest.raises(CheckpointError, match="not a state dict"):
        read_torch_state_dict(path)
    data = (PARITY / "theta.state").read_bytes()
    (tmp_path / "cut.state").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="ends in the middle"):
        elo.import_pylo(tmp_path / "cut.state")
    (tmp_path / "other.state").write_bytes(b"\x81\xa1a\x01")  # {"a": 1}
    with pytest.raises(CheckpointError, match="one dict of arrays"):
        elo.import_pylo(tmp_path / "other.state")


def test_celo2_naive_settings_elo_does_not_run_are_refused():
    with pytest.raises(ValueError, match="exp_mult"):
        elo.import_pylo(PUBLISHED, optimizer_config={"exp_mult": 0.5})
    with pytest.raises(ValueError, match="adam_betas"):
        elo.import_pylo(PUBLISHED, optimizer_config={"adam_betas": (0.9, 0.999)})
    with pytest.raises(ValueError, match="unknown Celo2_naive keyword 'lr_sched'"):
        elo.import_pylo(PUBLISHED, optimizer_config={"lr_sched": 1})
    lo = elo.import_pylo(PUBLISHED, optimizer_config={"adam_betas": [0.9, 0.95], "lr": 3e-4})
    assert lo.peak_lr == lo.init_lr == lo.end_lr == 3e-4
    with pytest.raises(ValueError, match="grad_clip_value must be positive"):
        lo.with_hyperparameters(grad_clip_value=0.0)
