"""Replay reference test vectors through the re-implementation (see tests/parity/README.md).

Every `<case>.npz` + `<case>.json` pair in `$ELO_PARITY_DIR` (default: `tests/parity`) is one
test, dispatched on the JSON `kind`. Every `expected/*` array in a file is checked, with the
file's own `recommended_tolerance` (first matching glob):
`|got - expected| <= atol + atol_rel_max * max|expected| + rtol * |expected|`.
"""

import fnmatch
import functools
import json
import os
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from elo import Celo2, SmallFC
from elo._inner._fusion import fused_step, imitation_losses
from elo.optimizers import expert_from_config, expert_lr_schedule, newton_schulz


PARITY_DIR = pathlib.Path(
    os.environ.get("ELO_PARITY_DIR", pathlib.Path(__file__).parent / "parity")
)
CASES = sorted(p.stem for p in PARITY_DIR.glob("*.npz") if p.with_suffix(".json").exists())
ARCHITECTURES = {"small_fc": SmallFC, "celo2": Celo2}
WEIGHT_KEYS = ("w0", "b0", "w1", "b1", "w2", "b2")


class Checker:
    """Checks arrays against a case file's expectations and records what was checked."""

    def __init__(self, z, meta):
        self.z = z
        self.rules = meta["recommended_tolerance"]
        self.checked: set[str] = set()
        self.worst = (0.0, "")

    def __call__(self, key: str, got, index=None):
        expected = self.z[key] if index is None else self.z[key][index]
        for pattern, rtol, atol, atol_rel_max in self.rules:
            if fnmatch.fnmatchcase(key, pattern):
                break
        else:
            raise KeyError(f"no tolerance rule matches {key}")
        got = np.asarray(got, np.float64)
        expected = np.asarray(expected, np.float64)
        assert got.shape == expected.shape, f"{key}: shape {got.shape} != {expected.shape}"
        self.checked.add(key)
        if expected.size == 0:
            return
        limit = atol + atol_rel_max * np.abs(expected).max() + rtol * np.abs(expected)
        err = np.abs(got - expected)
        ratio = np.where(
            limit > 0, err / np.where(limit > 0, limit, 1), np.where(err > 0, np.inf, 0)
        )
        self.worst = max(self.worst, (float(ratio.max()), key))
        assert np.all(err <= limit), (
            f"{key}{'' if index is None else f'[{index}]'}: max err {err.max():.3e}, "
            f"worst err/tol {ratio.max():.3g}"
        )

    def finish(self, stem: str):
        expected = {k for k in self.z.files if k.startswith("expected/")}
        assert expected == self.checked, f"unchecked keys: {sorted(expected - self.checked)}"
        print(f"{stem}: worst err/tol = {self.worst[0]:.3f} ({self.worst[1]})")


def _load(stem: str):
    z = np.load(PARITY_DIR / f"{stem}.npz")
    meta = json.loads((PARITY_DIR / f"{stem}.json").read_text())
    return z, meta


def _make_lo(z, meta):
    weights = {k: z[f"lo/{k}"] for k in WEIGHT_KEYS}
    return ARCHITECTURES[meta["architecture"]].from_config(meta["config"], weights=weights)


@functools.cache
def _expert_and_schedule(config_json: str, b2: float, meta_train: bool):
    """Cached, so that cases with the same configuration share one compiled program."""
    config = json.loads(config_json)
    schedule = expert_lr_schedule(
        config["expert_lr_max"], config["expert_lr_min"], config["expert_lr_decay_steps"]
    )
    expert = expert_from_config(config, b2=b2) if meta_train else None
    return expert, schedule


@eqx.filter_jit
def _trajectory(lo, expert, expert_schedule, params, all_grads, num_steps, alpha):
    """All T updates of a trajectory case in one scan. `num_steps` and `alpha` are traced."""
    include = lo.imitation_leaves(params)
    state = lo.init(params, num_steps=num_steps)
    expert_state = None if expert is None else expert.init(params)

    def body(carry, grads):
        params, state, expert_state, _ = carry
        t = state.iteration
        record = {
            "scheduled_lr": lo.learning_rate(t, state.num_steps),
            "expert_lr": expert_schedule(t),
        }
        if expert is None:
            updates, new_state = lo.update(grads, state, params)
            new_params = jax.tree.map(lambda p, u: p + u, params, updates)
        else:
            out = fused_step(expert, lo, alpha, grads, expert_state, state, params)
            l_dir, l_mag = imitation_losses(
                out.expert_delta, out.lo_delta, magnitude=lo.imitation_magnitude, include=include
            )
            record["cosine_loss"], record["magnitude_loss"] = l_dir, l_mag
            record["params_lo"] = jax.tree.map(lambda p, d: p + d, params, out.lo_delta)
            record["params_expert"] = jax.tree.map(lambda p, d: p + d, params, out.expert_delta)
            new_params, new_state, expert_state = out.params, out.lo_state, out.expert_state
        record["params"] = new_params
        return (new_params, new_state, expert_state, state), record

    carry = (params, state, expert_state, state)
    (params, state, _, last_state), records = jax.lax.scan(body, carry, all_grads)
    last_grads = jax.tree.map(lambda g: g[-1], all_grads)
    _, fac_g = lo.accumulate(last_state, lo.preprocess_grads(last_grads))
    finals = {
        "mom": state.mom,
        "rms": state.rms,
        "v_row": state.v_row,
        "v_col": state.v_col,
        "v_diag": state.v_diag,
        "fac_g": fac_g,
    }
    return records, finals, state.iteration


def _run_trajectory(z, meta, check):
    lo = _make_lo(z, meta)
    names = meta["param_names"]
    params = {n: jnp.asarray(z[f"init/params/{n}"]) for n in names}
    all_grads = {n: jnp.asarray(z[f"grads/{n}"]) for n in names}
    config = dict(meta["config"], expert_optim=meta["expert_optim"] or "adamw")
    expert, expert_schedule = _expert_and_schedule(
        json.dumps(config, sort_keys=True), lo.expert_b2, meta["meta_train"]
    )
    alpha = None
    if meta["meta_train"]:
        alpha = jnp.asarray(1.0 - meta["expert_weight"], jnp.float32)
    num_steps = jnp.asarray(meta["num_steps"], jnp.int32)
    records, finals, iteration = _trajectory(
        lo, expert, expert_schedule, params, all_grads, num_steps, alpha
    )
    assert int(iteration) == meta["T"]
    for key, value in records.items():
        if isinstance(value, dict):
            for n in names:
                if f"expected/{key}/{n}" in z.files:
                    check(f"expected/{key}/{n}", value[n])
        else:
            check(f"expected/{key}", value)
    for slot, tree in finals.items():
        for n in names:
            check(f"expected/final_state/{slot}/{n}", tree[n])


def _run_features(z, meta, check):
    lo = _make_lo(z, meta)
    extra = {"iteration": meta["iteration"]} if "iteration" in meta else {}
    slots = ("p", "g", "m", "rms", "fac_g", "v_row", "v_col", "v_diag")
    inputs = {
        name: {k: jnp.asarray(z[f"inputs/{name}/{k}"]) for k in slots} for name in meta["tensors"]
    }
    outputs = eqx.filter_jit(
        lambda lo, inputs: {name: lo.tensor_outputs(**x, **extra) for name, x in inputs.items()}
    )(lo, inputs)
    for name, got in outputs.items():
        prefix = f"expected/{name}/"
        for key in (k for k in z.files if k.startswith(prefix)):
            quantity = key[len(prefix) :]
            assert quantity in got, f"{key}: the optimizer does not produce {quantity!r}"
            check(key, got[quantity])


def _run_newton_schulz(z, meta, check):
    forms = {"celo2_form": "celo2", "elo_form": "elo"}
    keys = [k for k in z.files if k.startswith("expected/")]
    jobs = {k: (forms[k.split("/")[1]], jnp.asarray(z[f"inputs/{k.split('/')[2]}"])) for k in keys}

    @jax.jit
    def run(xs):
        return {
            k: newton_schulz(
                x, steps=meta["steps"], coeffs=tuple(meta["coefficients"]), form=jobs[k][0]
            )
            for k, x in xs.items()
        }

    for key, got in run({k: x for k, (_, x) in jobs.items()}).items():
        check(key, got)


RUNNERS = {
    "trajectory": _run_trajectory,
    "features": _run_features,
    "newton_schulz": _run_newton_schulz,
}


def test_parity_cases_found():
    assert CASES, f"no parity cases in {PARITY_DIR}"


FAST_CASES = frozenset(
    {"ns5", "smallfc_features", "celo2_features"}
    | {f"smallfc_adamw_w{w}" for w in ("0.0", "0.5", "1.0")}
)
"""The fast lane's cases (Newton-Schulz, both architectures' features, one fused pair, whose
three weights share one compiled step); full trajectories and the other fused pairs are slow."""


@pytest.mark.parametrize(
    "stem", [pytest.param(s, marks=() if s in FAST_CASES else pytest.mark.slow) for s in CASES]
)
def test_parity(stem):
    z, meta = _load(stem)
    check = Checker(z, meta)
    RUNNERS[meta["kind"]](z, meta, check)
    check.finish(stem)
