"""The neutral weight layout of the learned optimizers' MLPs (haiku's `x @ W`, `W: [in, out]`)."""

import re
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np


WEIGHT_NAMES = ("w0", "b0", "w1", "b1", "w2", "b2")

_GROUP = re.compile(r"^w0__(\d+)$")


def _unwrap(weights: Mapping[str, Any]) -> Mapping[str, Any]:
    """Strip haiku's `{"nn": {"~": ...}}` / `{"ff_mod_stack": {"~": ...}}` nesting."""
    while len(weights) == 1:
        (only,) = weights.values()
        if not isinstance(only, Mapping):
            break
        weights = only
    return weights


def hidden_size_of(weights: Mapping[str, Any]) -> int:
    """The hidden width of a weight dictionary (the length of `b0`)."""
    flat = _unwrap(weights)
    if "b0" not in flat:
        raise ValueError(f"weights must contain 'b0'; got keys {sorted(flat)}.")
    return int(np.shape(flat["b0"])[0])


def read_weights(
    weights: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], *, owner: str
) -> dict[str, np.ndarray]:
    """Validate and convert a weight dictionary to float32 numpy arrays.

    Accepts the neutral layout `{"w0", "b0", "w1", "b1", "w2", "b2"}`, optionally nested the way
    the reference checkpoints are (`theta["nn"]["~"]`, `theta["ff_mod_stack"]["~"]`); a first
    layer split into per-group matrices `w0__0`, `w0__1`, ... (Celo2's haiku layout) is stacked
    in *numeric* group order.
    """
    flat = dict(_unwrap(weights))
    groups = {int(m.group(1)): k for k in flat if (m := _GROUP.match(k))}
    if groups:
        if "w0" in flat:
            raise ValueError(f"{owner}: got both 'w0' and per-group 'w0__k' weights.")
        order = sorted(groups)
        if order != list(range(len(order))):
            raise ValueError(f"{owner}: first-layer groups must be w0__0..w0__K; got {order}.")
        flat["w0"] = np.concatenate([np.asarray(flat.pop(groups[k])) for k in order], axis=0)
    missing = [k for k in WEIGHT_NAMES if k not in flat]
    unknown = [k for k in flat if k not in WEIGHT_NAMES]
    if missing or unknown:
        raise ValueError(
            f"{owner}: weights must have exactly the keys {list(WEIGHT_NAMES)}; "
            f"missing {missing}, unexpected {unknown}."
        )
    out = {}
    for k in WEIGHT_NAMES:
        arr = np.asarray(flat[k])
        if not np.issubdtype(arr.dtype, np.floating):
            raise TypeError(f"{owner}: weight {k!r} must be a float array; got dtype {arr.dtype}.")
        if tuple(arr.shape) != tuple(shapes[k]):
            raise ValueError(
                f"{owner}: weight {k!r} must have shape {tuple(shapes[k])}; got {arr.shape}."
            )
        out[k] = arr.astype(np.float32)
    return out


def split_config(
    config: Mapping[str, Any],
    *,
    owner: str,
    renames: Mapping[str, str],
    required: Mapping[str, Any],
    ignored: frozenset[str],
) -> dict[str, Any]:
    """Map a reference constructor `config` to keyword arguments.

    `renames` maps reference names to ours; `required` lists keys whose value must equal the only
    value supported here; `ignored` lists keys that do not affect the optimizer itself (e.g. the
    expert's settings). Keys not in any of these are ignored with a warning.
    """
    kwargs: dict[str, Any] = {}
    unknown = []
    for key, value in config.items():
        if key in renames:
            if isinstance(value, list):
                value = tuple(value)
            kwargs[renames[key]] = value
        elif key in required:
            if value != required[key]:
                raise ValueError(
                    f"{owner}: config {key}={value!r} is not supported; only "
                    f"{key}={required[key]!r} is implemented."
                )
        elif key not in ignored:
            unknown.append(key)
    if unknown:
        warnings.warn(f"{owner}: ignoring unknown config keys {sorted(unknown)}.", stacklevel=3)
    return kwargs
