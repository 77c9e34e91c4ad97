"""The Celo2 authors' published optimizer as PyLO's `celo2` branch runs it (`Celo2_naive`):
its weight layouts and its settings, in `elo`'s terms."""

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..optimizers._newton_schulz import NS_COEFFS
from ._framing import CheckpointError


CELO2_NAIVE_COMMIT = "78c0e00be268b543bfc687562000b019495781e6"
"""The head of PyLO's `celo2` branch (github.com/Belilovsky-Lab/pylo) whose
`pylo/optim/Celo2_naive.py`, `pylo/models/Celo2_MLP.py` and `pylo/util/newton_schulz.py` the
layouts and settings here were checked against, and `tests/parity/pylo_celo2/` was made with."""

_GROUP_WIDTHS = (1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3)
_LAYERS = ("hidden.weight", "hidden.bias", "output.weight", "output.bias")
GROUPED_NAMES = frozenset(
    {f"first_layer_weights.{k}" for k in range(len(_GROUP_WIDTHS))} | {"first_layer_bias", *_LAYERS}
)
"""`Celo2MLP`'s per-group layout, as `celo2_weights.pt` stores it (`torch.nn.Linear`'s
`[out, in]` matrices)."""
DENSE_NAMES = frozenset({"first_layer.weight", "first_layer.bias", *_LAYERS})
"""`Celo2MLP`'s own `state_dict`: the first layer as one `[h, 30]` matrix."""
HAIKU_NAMES = frozenset(
    {f"w0__{k}" for k in range(len(_GROUP_WIDTHS))} | {"b0", "w1", "b1", "w2", "b2"}
)
"""The Celo2 authors' haiku parameters (`theta["ff_mod_stack"]["~"]` of `theta.state`)."""

# `Celo2_naive`'s keyword defaults in `elo.Celo2`'s terms: a constant rate `lr`, no global-norm
# clip, AdamW (betas 0.9, 0.95 = the first momentum and the last rms decay) at the same rate for
# vectors, embeddings and the first and last matrix, gradients of the learned path clipped to
# ±1000, and weight decay applied to the stepped parameters.
CELO2_NAIVE_SETTINGS: dict[str, Any] = {
    "init_lr": 1e-3,
    "peak_lr": 1e-3,
    "end_lr": 1e-3,
    "warmup_fraction": 0.0,
    "warmup_steps": 0,
    "weight_decay": 0.0,
    "adam_lr_mult": 1.0,
    "adam_weight_decay": None,
    "clip_grad": False,
    "momentum_decays": (0.9, 0.99, 0.999),
    "rms_decays": (0.95,),
    "adafactor_decays": (0.9, 0.99, 0.999),
    "orthogonalize": True,
    "adam_for_input_output": True,
    "grad_clip_value": 1000.0,
    "decay_after_step": True,
}

_RENAMES = {
    "lr": ("init_lr", "peak_lr", "end_lr"),
    "weight_decay": ("weight_decay",),
    "momentum_decays": ("momentum_decays",),
    "rms_decays": ("rms_decays",),
    "adafactor_decays": ("adafactor_decays",),
}
# Keywords whose only value `elo` implements (`adam_betas` is checked against the decays).
_REQUIRED = {
    "exp_mult": 0.0,
    "rmsmult": 1.0,
    "ns_coeffs": list(NS_COEFFS),
    "ns_iters": 5,
    "adam_eps": 1e-8,
}
_IGNORED = frozenset({"checkpoint_path", "params"})


def _matrix(tensors: Mapping[str, np.ndarray], name: str, what: str) -> np.ndarray:
    value = np.asarray(tensors[name])
    if value.ndim != 2:
        raise CheckpointError(f"{what}: {name!r} must be a matrix, got shape {value.shape}.")
    return value.T


def celo2_naive_weights(tensors: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The neutral layout (`w0 [30, h]`, `b0`, `w1`, `b1`, `w2 [h, 3]`, `b2`) of weights in one
    of `GROUPED_NAMES`, `DENSE_NAMES` or `HAIKU_NAMES`; [`elo.Celo2`][] checks the shapes."""
    names = set(tensors)
    if names == HAIKU_NAMES:
        return dict(tensors)  # Celo2 stacks the w0__k groups itself, in numeric order
    if names == GROUPED_NAMES:
        groups = [
            _matrix(tensors, f"first_layer_weights.{k}", what) for k in range(len(_GROUP_WIDTHS))
        ]
        widths = tuple(g.shape[0] for g in groups)
        if widths != _GROUP_WIDTHS:
            raise CheckpointError(
                f"{what}: the first layer's groups have widths {widths}; Celo2's are "
                f"{_GROUP_WIDTHS}."
            )
        w0, b0 = np.concatenate(groups, axis=0), tensors["first_layer_bias"]
    elif names == DENSE_NAMES:
        w0, b0 = _matrix(tensors, "first_layer.weight", what), tensors["first_layer.bias"]
    else:
        raise AssertionError(f"not a Celo2_naive layout: {sorted(names)}")
    return {
        "w0": w0,
        "b0": np.asarray(b0),
        "w1": _matrix(tensors, "hidden.weight", what),
        "b1": np.asarray(tensors["hidden.bias"]),
        "w2": _matrix(tensors, "output.weight", what),
        "b2": np.asarray(tensors["output.bias"]),
    }


def celo2_naive_kwargs(config: Mapping[str, Any], what: str) -> dict[str, Any]:
    """`elo.Celo2` keyword arguments from keyword arguments of PyLO's `Celo2_naive`."""
    if not isinstance(config, Mapping):
        raise TypeError(f"{what}: optimizer_config must be a dict, got {type(config).__name__}.")
    kwargs: dict[str, Any] = {}
    for key, value in config.items():
        if key in _RENAMES:
            for target in _RENAMES[key]:
                kwargs[target] = tuple(value) if isinstance(value, (list, tuple)) else value
        elif key in _REQUIRED:
            same = list(value) if isinstance(value, (list, tuple)) else value
            if same != _REQUIRED[key]:
                raise ValueError(
                    f"{what}: Celo2_naive's {key}={value!r} is not implemented by elo.Celo2; "
                    f"only {key}={_REQUIRED[key]!r} is."
                )
        elif key == "adam_betas":
            kwargs["_adam_betas"] = tuple(float(b) for b in value)
        elif key not in _IGNORED:
            known = sorted({*_RENAMES, *_REQUIRED, "adam_betas", *_IGNORED})
            raise ValueError(
                f"{what}: unknown Celo2_naive keyword {key!r}; known keywords: {', '.join(known)}."
            )
    return kwargs


def check_adam_betas(kwargs: dict[str, Any], what: str) -> None:
    """Drop a requested `adam_betas` from `kwargs`, refusing one `elo.Celo2` cannot run: its
    AdamW path reads the first momentum and the last rms accumulator."""
    betas = kwargs.pop("_adam_betas", None)
    if betas is None:
        return
    have = (kwargs["momentum_decays"][0], kwargs["rms_decays"][-1])
    if tuple(betas) != tuple(have):
        raise ValueError(
            f"{what}: adam_betas={betas} differ from (momentum_decays[0], rms_decays[-1]) = "
            f"{have}; elo.Celo2's AdamW path uses those accumulators. Set the decays instead."
        )
