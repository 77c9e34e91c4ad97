"""The hand-designed expert optimizers that ELO's learned optimizers imitate (AdamW and Muon)."""

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import optax


def expert_lr_schedule(
    lr_max: float = 1e-2, lr_min: float = 1e-4, decay_steps: int = 10_000
) -> optax.Schedule:
    """ELO's expert learning rate: a cosine from `lr_max` to `lr_min` over `decay_steps` steps.

    $\\eta_e(t) = \\eta_{min} + (\\eta_{max} - \\eta_{min})\\tfrac12\\left(1 +
    \\cos\\left(\\pi \\min(t/(T-1), 1)\\right)\\right)$, 0-based $t$, no warmup, independent of
    the length of the inner run. Built as
    `optax.cosine_decay_schedule(lr_max, decay_steps - 1, alpha=lr_min / lr_max)`.

    **Arguments:**

    - `lr_max`, `lr_min`: the learning rate at $t = 0$ and from $t = T - 1$ on.
    - `decay_steps`: $T$ (10 000 inner steps in ELO).

    **Returns:**

    An optax schedule.
    """
    if lr_max <= 0 or lr_min < 0 or decay_steps < 2:
        raise ValueError(
            "expert_lr_schedule needs lr_max > 0, lr_min >= 0 and decay_steps >= 2; got "
            f"lr_max={lr_max}, lr_min={lr_min}, decay_steps={decay_steps}."
        )
    return optax.cosine_decay_schedule(lr_max, decay_steps=decay_steps - 1, alpha=lr_min / lr_max)


# optax normalises by `||X||_F + eps` before Newton-Schulz, the reference by `max(||X||_F, 1e-8)`.
# The output of NS depends on the input's scale, so with eps = 1e-8 the two differ by ~1e-3
# relative once `||X||_F ~ 1e-5` (small, clipped gradients). An eps far below float32's
# resolution of any `||X||_F >= 1e-8` makes them agree there, and still maps X = 0 to 0.
_NS_EPS = 1e-30


def _as_float32(decay: float) -> float:
    # optax forms `1 - decay` in float64 before rounding, the learned optimizer's accumulators in
    # float32. Rounding the decay first makes both `1 - decay` factors the same float32 number,
    # so the expert's Adam moments follow the learned optimizer's recursion (to an ulp) instead
    # of drifting by ~1e-5 relative (for b2 = 0.999).
    return float(np.float32(decay))


def _default_lr(learning_rate: optax.ScalarOrSchedule | None) -> optax.ScalarOrSchedule:
    return expert_lr_schedule() if learning_rate is None else learning_rate


def adamw_expert(
    learning_rate: optax.ScalarOrSchedule | None = None,
    *,
    b2: float,
    b1: float = 0.9,
    weight_decay: float = 0.0,
) -> optax.GradientTransformation:
    """ELO's AdamW expert, for every parameter:
    $\\theta \\leftarrow \\theta - \\eta_e(t)\\left(\\hat m/(\\sqrt{\\hat v} + 10^{-8}) +
    \\lambda\\theta\\right)$, bias-corrected with $t + 1$, non-Nesterov.

    This is `optax.adamw(learning_rate, b1, b2, eps=1e-8, eps_root=0, weight_decay)`, with `b1`
    and `b2` rounded to float32 first (so that optax's $1 - \\beta$ is the learned optimizer's
    float32 one). Fed the learned optimizer's preprocessed gradients, its moments then equal the
    learned optimizer's momentum ($\\beta = 0.9$) and second-moment accumulators to within an
    ulp.

    **Arguments:**

    - `learning_rate`: a float or schedule; `None` means [`elo.optimizers.expert_lr_schedule`][]
      with its defaults (cosine $10^{-2} \\to 10^{-4}$ over 10 000 steps).
    - `b2`: $\\beta_2$; must be the learned optimizer's rms decay (`lo.expert_b2`: 0.999 for
      small_fc, 0.95 for Celo2).
    - `b1`: $\\beta_1$ (0.9).
    - `weight_decay`: $\\lambda$ (0 in every ELO config).

    **Returns:**

    An `optax.GradientTransformation`.
    """
    return optax.adamw(
        _default_lr(learning_rate),
        b1=_as_float32(b1),
        b2=_as_float32(b2),
        eps=1e-8,
        eps_root=0.0,
        weight_decay=weight_decay,
        nesterov=False,
    )


def muon_expert(
    learning_rate: optax.ScalarOrSchedule | None = None,
    *,
    b2: float,
    beta: float = 0.99,
    adam_b1: float = 0.9,
    adam_lr_scale: float = 0.3,
    weight_decay: float = 0.0,
) -> optax.GradientTransformation:
    """ELO's Muon expert.

    Matrices (`ndim == 2`, embeddings and heads included) take a Muon step: Nesterov momentum
    with $\\beta = 0.99$,
    $\\tilde m = \\beta \\mu/(1-\\beta^{t+2}) + (1-\\beta) g/(1-\\beta^{t+1})$,
    $O = \\mathrm{NS}_5(\\tilde m)$ and
    $\\theta \\leftarrow \\theta - \\eta_e(t)\\left(O\\sqrt{\\max(1, n_{out}/n_{in})} +
    \\lambda\\theta\\right)$. Every other parameter (scalars, vectors, conv kernels) takes a
    non-Nesterov AdamW step at `adam_lr_scale` times the learning rate.

    Built as `optax.multi_transform` of `optax.contrib.muon(lr, beta=beta, nesterov=True)`
    (label `"muon"`) and `optax.adamw(adam_lr_scale * lr, b1=adam_b1, b2=b2)` (label `"adam"`).
    A bare `optax.contrib.muon` would give its AdamW fallback Nesterov momentum too. Newton–Schulz
    normalises by $\\lVert\\tilde m\\rVert_F + 10^{-30}$ (optax's default is $+10^{-8}$), which
    equals ELO's $\\max(\\lVert\\tilde m\\rVert_F, 10^{-8})$ whenever the norm is at least
    $10^{-8}$: with small (e.g. clipped) gradients optax's default would change the step by
    ~$10^{-3}$ relative. The fallback's decays are rounded to float32 first (see
    [`elo.optimizers.adamw_expert`][]).

    **Arguments:**

    - `learning_rate`: a float or schedule; `None` means [`elo.optimizers.expert_lr_schedule`][]
      with its defaults.
    - `b2`: the AdamW fallback's $\\beta_2$; must be the learned optimizer's rms decay
      (`lo.expert_b2`).
    - `beta`: Muon's momentum (0.99: the learned optimizer's second momentum decay).
    - `adam_b1`: the AdamW fallback's $\\beta_1$ (0.9).
    - `adam_lr_scale`: the AdamW fallback's learning-rate factor (0.3 in ELO's configs).
    - `weight_decay`: $\\lambda$ for both parts (0 in every ELO config).

    **Returns:**

    An `optax.GradientTransformation`.
    """
    lr = _default_lr(learning_rate)
    if callable(lr):
        schedule = lr
        adam_lr = lambda count: adam_lr_scale * schedule(count)
    else:
        adam_lr = adam_lr_scale * lr
    return optax.multi_transform(
        {
            "muon": optax.contrib.muon(
                lr, beta=beta, eps=_NS_EPS, nesterov=True, weight_decay=weight_decay
            ),
            "adam": optax.adamw(
                adam_lr,
                b1=_as_float32(adam_b1),
                b2=_as_float32(b2),
                eps=1e-8,
                eps_root=0.0,
                weight_decay=weight_decay,
                nesterov=False,
            ),
        },
        lambda params: jax.tree.map(lambda x: "muon" if x.ndim == 2 else "adam", params),
    )


def expert_from_config(config: Mapping[str, Any], *, b2: float) -> optax.GradientTransformation:
    """The expert described by a reference learned-optimizer `config`.

    Reads `expert_optim` (`"adamw"` or `"muon"`), `expert_lr_max`, `expert_lr_min`,
    `expert_lr_decay_steps`, `expert_weight_decay`, `muon_expert_adamlr_scaler` and the
    momentum decays (`initial_momentum_decays[0]` is $\\beta_1$, `[1]` Muon's $\\beta$), with
    the reference class defaults for missing keys.

    **Arguments:**

    - `config`: the reference constructor kwargs (e.g. the `config` of a parity file).
    - `b2`: the learned optimizer's rms decay (`lo.expert_b2`).

    **Returns:**

    An `optax.GradientTransformation`.
    """
    kind = config.get("expert_optim", "adamw")
    schedule = expert_lr_schedule(
        config.get("expert_lr_max", 1e-3),
        config.get("expert_lr_min", 1e-5),
        config.get("expert_lr_decay_steps", 10_000),
    )
    decays = tuple(config.get("initial_momentum_decays", (0.9, 0.99, 0.999)))
    weight_decay = config.get("expert_weight_decay", 0.0)
    if kind == "adamw":
        return adamw_expert(schedule, b1=decays[0], b2=b2, weight_decay=weight_decay)
    if kind == "muon":
        return muon_expert(
            schedule,
            b2=b2,
            beta=decays[1],
            adam_b1=decays[0],
            adam_lr_scale=config.get("muon_expert_adamlr_scaler", 0.3),
            weight_decay=weight_decay,
        )
    raise ValueError(f"expert_optim must be 'adamw' or 'muon'; got {kind!r}.")
