"""Reference vectors of PyLO's own Celo2 (`Celo2_naive`) with the Celo2 authors' published weights.

Not part of the test suite and never imported by `elo`: run once, in a throwaway environment
with PyTorch and flax (neither is a dependency of `elo`), over a checkout of PyLO's `celo2`
branch:

    python -m venv /tmp/pylo-env && /tmp/pylo-env/bin/pip install "torch==2.13.0+cpu" flax
    git -C <pylo clone> archive celo2 | tar -x -C /tmp/pylo-celo2
    /tmp/pylo-env/bin/python tests/parity/pylo_celo2/generate.py /tmp/pylo-celo2

It writes, beside this file:

- `<case>.npz` + `<case>.json` for each case below: the initial parameters, the gradient fed at
  every step and the parameters after every `Celo2_naive.step()`; the JSON records the
  optimizer's arguments, the parameter order and names, which parameters PyLO sends to AdamW,
  the PyLO commit, and the versions of torch and numpy.
- `theta.state`: the published weights written back in the Celo2 authors' own format, a flax
  msgpack file of `{"ff_mod_stack": {"~": {"w0__0", ..., "w0__13", "b0", "w1", "b1", "w2",
  "b2"}}}` (haiku's `[in, out]` layout, the inverse of PyLO's
  `scripts/convert_celo2_checkpoint.py`), made with `flax.serialization.to_bytes`.

The gradients are drawn from a seeded numpy generator, not computed from a loss: the optimizer
sees only parameters and gradients, and fixed gradients make the trajectory independent of
torch's and XLA's matmul round-off in a model's backward pass.
"""

import hashlib
import importlib.util
import json
import platform
import subprocess
import sys
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np


HERE = Path(__file__).parent
STEPS = 6
# One huge gradient entry on a learned-path matrix at this step: PyLO clips the learned path's
# gradients to ±1000 elementwise before its accumulators.
HUGE_STEP = 2

# (name, shape, gradient scale), in the order of the model's parameters. PyLO's AdamW set: every
# tensor of rank <= 1, every name containing "embed", and the first and the last tensor of rank
# >= 2 in this order.
CASES = {
    "mlp": [
        ("l0_input.weight", (8, 16), 1.0),
        ("l0_input.bias", (16,), 1.0),
        ("l1_hidden.weight", (16, 16), 0.3),
        ("l2_wide.weight", (12, 24), 3.0),
        ("l2_wide.bias", (24,), 0.1),
        ("l3_conv.weight", (3, 3, 4, 8), 1.0),
        ("l4_output.weight", (20, 10), 1.0),
        ("l4_output.bias", (10,), 1.0),
    ],
    "embedding": [
        ("a_token_embed.weight", (12, 6), 1.0),
        ("b_proj.weight", (6, 16), 1.0),
        ("c_norm.scale", (16,), 1.0),
        ("d_mlp.weight", (16, 9), 0.5),
        ("e_head.weight", (9, 7), 1.0),
    ],
}
# (case file, parameter set, Celo2_naive keyword arguments)
RUNS = [
    ("pylo_celo2_defaults", "mlp", {"lr": 1e-3}),
    ("pylo_celo2_weight_decay", "mlp", {"lr": 3e-3, "weight_decay": 0.1}),
    ("pylo_celo2_embedding", "embedding", {"lr": 1e-2, "weight_decay": 0.05}),
]


def _load_pylo(root: Path):
    """PyLO's Celo2 modules, imported without running `pylo/__init__.py` (which imports every
    optimizer and their optional dependencies)."""
    for package in ("pylo", "pylo.models", "pylo.optim", "pylo.util"):
        module = types.ModuleType(package)
        module.__path__ = [str(root / package.replace(".", "/"))]
        sys.modules[package] = module
    out = {}
    for name in ("pylo.util.newton_schulz", "pylo.models.Celo2_MLP", "pylo.optim.Celo2_naive"):
        spec = importlib.util.spec_from_file_location(
            name, root / (name.replace(".", "/") + ".py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        out[name] = module
    return out


def _run(torch, pylo, weights: Path, params_spec, kwargs, seed: int):
    rng = np.random.default_rng(seed)
    names = [name for name, _, _ in params_spec]
    init = {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape, _ in params_spec}
    grads = {
        name: (scale * rng.normal(0, 1, (STEPS,) + shape)).astype(np.float32)
        for name, shape, scale in params_spec
    }
    learned = [
        name for name, shape, _ in params_spec if len(shape) >= 2 and "embed" not in name.lower()
    ]
    # A gradient entry past PyLO's ±1000 clip on the second learned-path matrix.
    huge_name = learned[1]
    grads[huge_name][HUGE_STEP].flat[3] = 5000.0

    module = torch.nn.Module()
    module.params = torch.nn.ParameterDict(
        OrderedDict((name.replace(".", "__"), torch.nn.Parameter(torch.tensor(init[name])))
                    for name in names)
    )
    Celo2_naive = pylo["pylo.optim.Celo2_naive"].Celo2_naive
    optimizer = Celo2_naive(list(module.parameters()), checkpoint_path=str(weights), **kwargs)
    optimizer.set_param_names(module)
    params = list(module.parameters())
    is_adamw = [bool(optimizer._param_is_adamw[id(p)]) for p in params]
    trajectory = {name: np.zeros((STEPS,) + init[name].shape, np.float32) for name in names}
    for t in range(STEPS):
        for name, p in zip(names, params):
            p.grad = torch.tensor(grads[name][t])
        optimizer.step()
        for name, p in zip(names, params):
            trajectory[name][t] = p.detach().numpy()
    arrays = {}
    for name in names:
        arrays[f"init/{name}"] = init[name]
        arrays[f"grads/{name}"] = grads[name]
        arrays[f"params/{name}"] = trajectory[name]
    return arrays, dict(zip(names, is_adamw)), huge_name


def _theta_state(torch, weights: Path) -> bytes:
    import flax.serialization

    state = torch.load(weights, map_location="cpu", weights_only=True)
    inner = {}
    for k in range(14):
        inner[f"w0__{k}"] = state[f"first_layer_weights.{k}"].numpy().T.copy()
    inner["b0"] = state["first_layer_bias"].numpy().copy()
    inner["w1"] = state["hidden.weight"].numpy().T.copy()
    inner["b1"] = state["hidden.bias"].numpy().copy()
    inner["w2"] = state["output.weight"].numpy().T.copy()
    inner["b2"] = state["output.bias"].numpy().copy()
    return flax.serialization.to_bytes({"ff_mod_stack": {"~": inner}})


def main(root: Path) -> None:
    import flax
    import torch

    torch.manual_seed(0)
    pylo = _load_pylo(root)
    weights = root / "pylo" / "models" / "celo2_weights.pt"
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    provenance = {
        "source": "Belilovsky-Lab/pylo, branch celo2",
        "pylo_commit": commit or "78c0e00be268b543bfc687562000b019495781e6 (git archive)",
        "code": [
            "pylo/optim/Celo2_naive.py",
            "pylo/models/Celo2_MLP.py",
            "pylo/util/newton_schulz.py",
        ],
        "weights": "pylo/models/celo2_weights.pt",
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        "torch": torch.__version__,
        "flax": flax.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "generator": "tests/parity/pylo_celo2/generate.py",
    }
    for seed, (case, param_set, kwargs) in enumerate(RUNS):
        arrays, is_adamw, huge_name = _run(torch, pylo, weights, CASES[param_set], kwargs, seed)
        np.savez(HERE / f"{case}.npz", **arrays)
        record = {
            "case": case,
            "optimizer": "pylo.optim.Celo2_naive.Celo2_naive",
            "kwargs": kwargs,
            "steps": STEPS,
            "seed": seed,
            "param_order": [name for name, _, _ in CASES[param_set]],
            "pylo_is_adamw": is_adamw,
            "huge_gradient": {"param": huge_name, "step": HUGE_STEP, "flat_index": 3,
                              "value": 5000.0},
            "set_param_names": True,
            **provenance,
        }
        (HERE / f"{case}.json").write_text(json.dumps(record, indent=1) + "\n")
        print(case, "AdamW:", [k for k, v in is_adamw.items() if v])
    (HERE / "theta.state").write_bytes(_theta_state(torch, weights))
    (HERE / "theta.state.json").write_text(
        json.dumps(
            {
                "file": "theta.state",
                "what": "celo2_weights.pt in the Celo2 authors' flax msgpack layout",
                "made_with": "flax.serialization.to_bytes",
                **provenance,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
