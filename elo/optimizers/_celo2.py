"""Celo2 (Moudgil et al. 2026) in ELO's form: a tiny MLP, Newton–Schulz and RMS normalisation."""

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, PyTree

from .._custom_types import Params, Updates
from ._accumulators import factored_dims, LOState, safe_rsqrt
from ._chunked import (
    check_chunk_size,
    default_chunk_size,
    factored_features,
)
from ._mlp_optimizer import AbstractMLPOptimizer
from ._network import (
    bcast,
    explicit_features,
    MERGE_SIZE,
    mlp,
    mlp_many,
    second_moment_normalize,
    streamed_mlp,
    TensorFeatures,
    truncated_normal,
)
from ._newton_schulz import NS_COEFFS
from ._newton_schulz_mesh import newton_schulz_many
from ._preprocess import check_structure
from ._weights import hidden_size_of, read_weights, split_config, WEIGHT_NAMES


_NUM_FEATURES = 30
_NUM_VECTOR_FEATURES = 15
_FACTORED_DENSE_ROWS = tuple(range(15)) + (27, 28, 29)
_ROW_ROWS = (15, 16, 17, 21, 22, 23)
_COL_ROWS = (18, 19, 20, 24, 25, 26)
_VECTOR_ROWS = tuple(range(_NUM_VECTOR_FEATURES))
_EPS = 1e-9
# Defaults of the reference `Celo2Transformation` that ELO never changes; a config may repeat
# them but not change them.
_FIXED_CELO2_KWARGS = {
    "exp_mult": 0.0,
    "rmsmult": 1.0,
    "with_g": True,
    "with_m": True,
    "with_rms": True,
    "with_rms_norm_g": True,
    "with_rsqrt_rms": True,
    "with_p": True,
    "with_fac_norm_g": True,
    "with_fac_rms": True,
    "with_fac_rsqrt": True,
    "with_grad_clip_feat": True,
    "with_fac_mom_mult": True,
    "with_rms_only_norm_g": True,
    "param_scale_mult": False,
    "precondition_output": False,
    "normalize_input": True,
    "normalize_output": True,
    "aggregate_mag": False,
    "bias_correction": False,
    "mlp_activation": "relu",
    "ns_coeffs": list(NS_COEFFS),
    "ns_iters": 5,
    "ns_eps": 1e-8,
    "use_adamw_for_1d": True,
    "ff_hidden_layers": 2,
}


def _features(p, g, m, v, fac_g, v_row, v_col) -> TensorFeatures:
    rsqrt_v = lax.rsqrt(v + 1e-8)
    gc = g[..., None]
    base = (gc, jnp.clip(gc, -0.1, 0.1), p[..., None], m, v, m * rsqrt_v, rsqrt_v, fac_g)
    base = base + (gc * rsqrt_v,)
    dims = factored_dims(p.shape)
    if dims is None:
        return TensorFeatures(base, None, None, _VECTOR_ROWS, (), ())
    d1, d0 = dims
    reduced_d1 = d1 - 1 if d1 > d0 else d1
    row_factor = safe_rsqrt(v_row / (jnp.mean(v_row, axis=reduced_d1, keepdims=True) + 1e-9))
    col_factor = safe_rsqrt(v_col)
    fac_mom = m * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
    dense = base + (fac_mom,)
    row = jnp.expand_dims(jnp.concatenate([v_row, lax.rsqrt(v_row + 1e-8)], -1), d0)
    col = jnp.expand_dims(jnp.concatenate([v_col, lax.rsqrt(v_col + 1e-8)], -1), d1)
    return TensorFeatures(dense, row, col, _FACTORED_DENSE_ROWS, _ROW_ROWS, _COL_ROWS)


def _dense_channels(p, g, m, v, rowf, colf):
    """The full-size channels of `_features` (rank >= 2) from per-element inputs (any float
    dtype) and the Adafactor row and column factors `rowf`, `colf` broadcast to the tensor's
    rank."""
    p, g, m, v = (x.astype(jnp.float32) for x in (p, g, m, v))
    rsqrt_v = lax.rsqrt(v + 1e-8)
    gc = g[..., None]
    fac_g = gc * rowf * colf
    base = (gc, jnp.clip(gc, -0.1, 0.1), p[..., None], m, v, m * rsqrt_v, rsqrt_v, fac_g)
    return base + (gc * rsqrt_v, m * rowf * colf)


def _mlp_axes(ndim: int) -> tuple[int, ...]:
    """The axes the MLP's features are normalised over: the last two (each matrix of a stack
    on its own)."""
    return tuple(range(ndim))[-2:]


def _is_adam_path(path, leaf) -> bool:
    return jnp.ndim(leaf) <= 1 or "embed" in jax.tree_util.keystr(path)


def _adam_routes(path_leaves, *, input_output: bool) -> list[bool]:
    """Whether each `(path, leaf)` takes the AdamW step; with `input_output`, the first and the
    last leaf of rank >= 2 (in flatten order) do too."""
    routes = [_is_adam_path(path, leaf) for path, leaf in path_leaves]
    if input_output:
        matrices = [i for i, (_, leaf) in enumerate(path_leaves) if jnp.ndim(leaf) >= 2]
        for i in matrices[:1] + matrices[-1:]:
            routes[i] = True
    return routes


class Celo2(AbstractMLPOptimizer):
    """Celo2 as meta-trained by ELO (`ELO_Celo2LOpt`).

    For a matrix (or a conv kernel, slice by slice over its last two axes), an MLP
    $30 \\to 8 \\to 8 \\to 3$ (ReLU) maps the 30 per-element features, each normalised by its RMS
    over the last two axes, to a direction $d$ (output 0; the other two outputs are unused). The
    step is orthogonalised and RMS-normalised,

    $$s = \\mathrm{RMSnorm}(\\mathrm{NS}_5(d)), \\qquad
    \\theta \\leftarrow \\theta - \\eta_{t+1}(s + \\lambda_{wd}\\theta),$$

    while vectors, scalars and parameters whose path contains `"embed"` (and, with
    `adam_for_input_output`, the first and the last matrix) take an AdamW step built from the
    shared accumulators,
    $\\theta \\leftarrow \\theta - k\\,\\eta_{t+1}\\left(\\hat m/(\\sqrt{\\hat v} + 10^{-8}) +
    \\lambda_{a}\\theta\\right)$ with $\\hat m = m_{0.9}/(1-0.9^{t+1})$ and
    $\\hat v = v/(1-\\beta_v^{t+1})$.

    The meta-parameters are the arrays `w0 [30, 8]` (the per-group first-layer matrices
    `w0__0 ... w0__13` stacked in numeric group order), `b0, w1, b1, w2 [8, 3], b2`.
    Defaults follow ELO's README meta-training command: constant learning rate $10^{-3}$
    (`init_lr = peak_lr = end_lr = 1e-3`, no warmup), `adam_lr_mult = 20`,
    `weight_decay = 0`, gradient clipping at global norm 1. (ELO's `elo_celo2.py` config file
    instead has `init_lr = 0`, `peak_lr = 1e-3`, `end_lr = 0`, `warmup_fraction = 0.05`,
    `weight_decay = 0.1`, `adam_lr_mult = 1`.)

    PyLO's `Celo2_naive` (the PyTorch port of the Celo2 authors' optimizer) is this class with
    `adam_lr_mult = 1`, `clip_grad = False`, `adam_for_input_output = True`,
    `grad_clip_value = 1000` and `decay_after_step = True`, at a constant rate; see
    [`elo.import_pylo`][].
    """

    w0: Float[Array, "30 hidden"]
    b0: Float[Array, " hidden"]
    w1: Float[Array, "hidden hidden"]
    b1: Float[Array, " hidden"]
    w2: Float[Array, "hidden 3"]
    b2: Float[Array, " 3"]
    momentum_decays: tuple[float, ...] = eqx.field(static=True)
    rms_decays: tuple[float, ...] = eqx.field(static=True)
    adafactor_decays: tuple[float, ...] = eqx.field(static=True)
    init_lr: float = eqx.field(static=True)
    peak_lr: float = eqx.field(static=True)
    end_lr: float = eqx.field(static=True)
    warmup_fraction: float = eqx.field(static=True)
    warmup_steps: int = eqx.field(static=True)
    weight_decay: float = eqx.field(static=True)
    adam_lr_mult: float = eqx.field(static=True)
    adam_weight_decay: float | None = eqx.field(static=True)
    clip_grad: bool = eqx.field(static=True)
    clip_norm: float = eqx.field(static=True)
    orthogonalize: bool = eqx.field(static=True)
    adam_for_input_output: bool = eqx.field(static=True)
    grad_clip_value: float | None = eqx.field(static=True)
    decay_after_step: bool = eqx.field(static=True)

    imitation_magnitude: ClassVar[Literal["norm", "elementwise"]] = "elementwise"
    num_features: ClassVar[int] = _NUM_FEATURES

    def __init__(
        self,
        *,
        key: PRNGKeyArray | None = None,
        weights: Mapping[str, Any] | None = None,
        hidden_size: int = 8,
        momentum_decays: tuple[float, ...] = (0.9, 0.99, 0.999),
        rms_decays: tuple[float, ...] = (0.95,),
        adafactor_decays: tuple[float, ...] = (0.9, 0.99, 0.999),
        init_lr: float = 1e-3,
        peak_lr: float = 1e-3,
        end_lr: float = 1e-3,
        warmup_fraction: float = 0.0,
        warmup_steps: int = 0,
        weight_decay: float = 0.0,
        adam_lr_mult: float = 20.0,
        adam_weight_decay: float | None = None,
        clip_grad: bool = True,
        clip_norm: float = 1.0,
        orthogonalize: bool = True,
        adam_for_input_output: bool = False,
        grad_clip_value: float | None = None,
        decay_after_step: bool = False,
    ):
        """**Arguments:**

        - `key`: initialises the MLP: every weight is drawn from a normal distribution with
          standard deviation $1/\\sqrt{\\text{fan\\_in}}$ truncated at $\\pm 2\\sigma$ (not
          rescaled, as haiku's `TruncatedNormal`), with fan-in 30 for every row of `w0` and 8
          for `w1`, `w2`; biases are 0. Not needed with `weights`.
        - `weights`: MLP weights in the neutral layout (`w0 [30, h]`, `b0 [h]`, `w1 [h, h]`,
          `b1 [h]`, `w2 [h, 3]`, `b2 [3]`); per-group `w0__k` matrices (haiku layout) are
          stacked in numeric order.
        - `hidden_size`: $h$ (8).
        - `momentum_decays`, `rms_decays`, `adafactor_decays`: accumulator decays
          ((0.9, 0.99, 0.999), (0.95,), (0.9, 0.99, 0.999)).
        - `init_lr`, `peak_lr`, `end_lr`, `warmup_fraction`, `warmup_steps`: the schedule
          $\\eta$ of `learning_rate` (1e-3, 1e-3, 1e-3, 0.0, 0).
        - `weight_decay`: $\\lambda_{wd}$ for the Celo2 path (0.0).
        - `adam_lr_mult`: $k$, the AdamW path's learning-rate multiplier (20.0).
        - `adam_weight_decay`: $\\lambda_a$; `None` means `weight_decay`.
        - `clip_grad`, `clip_norm`: clip gradients by global norm first (True, 1.0).
        - `orthogonalize`: apply Newton–Schulz to matrix steps (True).
        - `adam_for_input_output`: the first and the last parameter of rank $\\geq 2$ in the
          tree's flatten order (a model's input and output layers, for a model whose fields
          run from input to output) take the AdamW step too, as in PyLO's `Celo2_naive`
          (False).
        - `grad_clip_value`: clip the gradients of the Celo2-path parameters elementwise to
          $\\pm$ this value before the accumulators (after `clip_grad`), as the Celo2 authors'
          optax code and PyLO do with 1000; `None` does not clip (None).
        - `decay_after_step`: decay the parameter after the learned step,
          $\\theta \\leftarrow (\\theta - \\eta s)(1 - \\eta\\lambda_{wd})$, as PyLO's
          `Celo2_naive` does, instead of $\\theta - \\eta(s + \\lambda_{wd}\\theta)$ (False).
        """
        if grad_clip_value is not None and not float(grad_clip_value) > 0:
            raise ValueError(
                f"Celo2: grad_clip_value must be positive or None, got {grad_clip_value!r}."
            )
        shapes = {
            "w0": (_NUM_FEATURES, hidden_size),
            "b0": (hidden_size,),
            "w1": (hidden_size, hidden_size),
            "b1": (hidden_size,),
            "w2": (hidden_size, 3),
            "b2": (3,),
        }
        if weights is None:
            if key is None:
                raise ValueError("Celo2 needs a `key` to initialise its weights (or `weights`).")
            k0, k1, k2 = jax.random.split(key, 3)
            w = {
                "w0": truncated_normal(k0, shapes["w0"], _NUM_FEATURES),
                "b0": jnp.zeros(shapes["b0"]),
                "w1": truncated_normal(k1, shapes["w1"], hidden_size),
                "b1": jnp.zeros(shapes["b1"]),
                "w2": truncated_normal(k2, shapes["w2"], hidden_size),
                "b2": jnp.zeros(shapes["b2"]),
            }
        else:
            w = {k: jnp.asarray(v) for k, v in read_weights(weights, shapes, owner="Celo2").items()}
        self.w0, self.b0, self.w1, self.b1, self.w2, self.b2 = (w[k] for k in WEIGHT_NAMES)
        self.momentum_decays = tuple(float(b) for b in momentum_decays)
        self.rms_decays = tuple(float(b) for b in rms_decays)
        self.adafactor_decays = tuple(float(b) for b in adafactor_decays)
        self.init_lr = float(init_lr)
        self.peak_lr = float(peak_lr)
        self.end_lr = float(end_lr)
        self.warmup_fraction = float(warmup_fraction)
        self.warmup_steps = int(warmup_steps)
        self.weight_decay = float(weight_decay)
        self.adam_lr_mult = float(adam_lr_mult)
        self.adam_weight_decay = None if adam_weight_decay is None else float(adam_weight_decay)
        self.clip_grad = bool(clip_grad)
        self.clip_norm = float(clip_norm)
        self.orthogonalize = bool(orthogonalize)
        self.adam_for_input_output = bool(adam_for_input_output)
        self.grad_clip_value = None if grad_clip_value is None else float(grad_clip_value)
        self.decay_after_step = bool(decay_after_step)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        key: PRNGKeyArray | None = None,
        weights: Mapping[str, Any] | None = None,
    ) -> "Celo2":
        """Build from the keyword arguments of the reference `ELO_Celo2LOpt`.

        **Arguments:**

        - `config`: the reference constructor kwargs (e.g. the `config` of a parity file).
          Missing keys take the reference class defaults (so `{}` is the `ELO_Celo2LOpt` class,
          not this class's README defaults; with `weights`, the hidden size is read from them).
          Expert settings and `meta_train` are ignored. Values this implementation does not
          support (`use_adamw_for_1d=False`, `ff_hidden_layers != 2`, a changed
          `Celo2Transformation` switch) raise a `ValueError`; unknown keys are ignored with a
          warning.
        - `key`, `weights`: as for the constructor.

        **Returns:**

        A `Celo2`.
        """
        reference_defaults = {
            "init_lr": 0.0,
            "peak_lr": 1e-3,
            "end_lr": 1e-5,
            "warmup_fraction": 0.0,
            "warmup_steps": 0,
            "weight_decay": 0.0,
            "adam_lr_mult": 1.0,
            "clip_grad": False,
        }
        kwargs = split_config(
            config,
            owner="Celo2.from_config",
            renames={
                "orthogonalize": "orthogonalize",
                "ff_hidden_size": "hidden_size",
                "initial_momentum_decays": "momentum_decays",
                "initial_rms_decays": "rms_decays",
                "initial_adafactor_decays": "adafactor_decays",
                "init_lr": "init_lr",
                "peak_lr": "peak_lr",
                "warmup_steps": "warmup_steps",
                "warmup_fraction": "warmup_fraction",
                "end_lr": "end_lr",
                "weight_decay": "weight_decay",
                "adam_lr_mult": "adam_lr_mult",
                "adam_weight_decay": "adam_weight_decay",
                "clip_grad": "clip_grad",
                "clip_norm": "clip_norm",
            },
            required=_FIXED_CELO2_KWARGS,
            ignored=frozenset(
                {
                    "expert_lr_max",
                    "expert_lr_min",
                    "expert_lr_decay_steps",
                    "expert_weight_decay",
                    "expert_optim",
                    "muon_expert_adamlr_scaler",
                    "meta_train",
                }
            ),
        )
        if weights is not None and "hidden_size" not in kwargs:
            kwargs["hidden_size"] = hidden_size_of(weights)
        return cls(key=key, weights=weights, **{**reference_defaults, **kwargs})

    def learning_rate(
        self, iteration: Int[ArrayLike, ""], num_steps: Int[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """$\\eta_{t+1}$, with $\\eta_x$ a linear warmup from `init_lr` to `peak_lr` over
        $W = \\max(\\text{warmup\\_fraction}\\cdot N, 1)$ steps (or `max(warmup_steps, 1)`), then
        a cosine from `peak_lr` to `end_lr` reached at $x = N$. Note the shift: update $t$ uses
        $\\eta_{t+1}$."""
        n = jnp.asarray(num_steps, jnp.int32)
        step = (jnp.asarray(iteration, jnp.int32) + 1).astype(jnp.float32)
        if self.warmup_fraction > 0:
            warmup = jnp.float32(self.warmup_fraction * n)
        else:
            warmup = self.warmup_steps
        warmup = jnp.maximum(jnp.asarray(warmup, jnp.float32), 1.0)
        decay = jnp.maximum(n.astype(jnp.float32), 1.0)
        ramp = self.init_lr + (self.peak_lr - self.init_lr) * jnp.minimum(step / warmup, 1.0)
        progress = jnp.clip((step - warmup) / jnp.maximum(decay - warmup, 1.0), 0.0, 1.0)
        cosine = self.end_lr + (self.peak_lr - self.end_lr) * 0.5 * (
            1.0 + jnp.cos(jnp.pi * progress)
        )
        return jnp.where(step < warmup, ramp, cosine).astype(jnp.float32)

    def imitation_leaves(self, params: Params) -> PyTree[bool]:
        """The Celo2-path parameters: rank $\\geq 2$, no `"embed"` in the path and, with
        `adam_for_input_output`, neither the first nor the last matrix."""
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
        routes = _adam_routes(path_leaves, input_output=self.adam_for_input_output)
        return jax.tree.unflatten(treedef, [not adam for adam in routes])

    @property
    def expert_b2(self) -> float:
        """`rms_decays[-1]`."""
        return self.rms_decays[-1]

    def _rest(self, h):
        """The layers after the first: hidden activations `[..., h]` to `(direction,)`."""
        h = jax.nn.relu(h @ self.w1 + bcast(self.b1, h.ndim))
        return (h @ self.w2[:, 0] + self.b2[0],)

    def _direction(self, feats: TensorFeatures, ndim: int):
        (direction,) = mlp(feats, self.w0, self.b0, self._rest, axes=_mlp_axes(ndim), eps=_EPS)
        return direction

    def _steps(self, directions: list[Array]) -> list[tuple[Array, Array]]:
        """`(orthogonalised direction, step)` of every direction: Newton–Schulz of the matrices
        (spread over the devices of a mesh, `newton_schulz_many`), then the RMS norm."""
        ortho = [i for i, d in enumerate(directions) if self.orthogonalize and d.ndim >= 2]
        done = dict(zip(ortho, newton_schulz_many([directions[i] for i in ortho])))
        out = []
        for i, direction in enumerate(directions):
            ns = done.get(i, direction)
            out.append((ns, second_moment_normalize(ns, _mlp_axes(ns.ndim), _EPS)))
        return out

    def update_preprocessed(
        self,
        grads: Updates,
        state: LOState,
        params: Params,
        *,
        chunk_size: int | None = None,
    ) -> tuple[Updates, LOState]:
        """One update from preprocessed gradients: `(updates, new_state)`. Pure; jit- and
        vmap-able (e.g. over a batch of optimizee states). `chunk_size`: see
        [`elo.as_optax`][]."""
        check_structure(grads, params, state.mom, owner="Celo2")
        chunk_size = check_chunk_size(chunk_size, owner="Celo2.update")
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
        routes = _adam_routes(path_leaves, input_output=self.adam_for_input_output)
        if self.grad_clip_value is not None:
            c = self.grad_clip_value
            clipped = [
                g if adam else jnp.clip(g, -c, c)
                for g, adam in zip(treedef.flatten_up_to(grads), routes)
            ]
            grads = jax.tree.unflatten(treedef, clipped)
        t = state.iteration
        state, fac_g = self.accumulate(state, grads)
        lr = self.learning_rate(t, state.num_steps)
        count = t + 1
        adam_lr = self.adam_lr_mult * lr
        adam_wd = self.weight_decay if self.adam_weight_decay is None else self.adam_weight_decay
        b1 = jnp.asarray(self.momentum_decays[0], jnp.float32)
        b2 = jnp.asarray(self.rms_decays[-1], jnp.float32)
        others = [
            treedef.flatten_up_to(x)
            for x in (grads, state.mom, state.rms, fac_g, state.v_row, state.v_col)
        ]
        updates: list[Array | None] = [None] * len(path_leaves)
        directions: dict[int, Array] = {}
        # Runs of consecutive small matrices share their matmuls (`mlp_many`); a large matrix
        # is streamed through the MLP chunk by chunk on its own.
        runs: list[list[int]] = [[]]
        feats: dict[int, TensorFeatures] = {}
        for i, ((_, p), g, m, v, fg, row, col) in enumerate(zip(path_leaves, *others)):
            p32, m, v = p.astype(jnp.float32), m.astype(jnp.float32), v.astype(jnp.float32)
            if routes[i]:
                m_hat = m[..., 0] / (1.0 - b1**count)
                v_hat = v[..., -1] / (1.0 - b2**count)
                u = -(adam_lr * (m_hat / (jnp.sqrt(v_hat) + 1e-8) + adam_wd * p32))
                updates[i] = u.reshape(p.shape).astype(p.dtype)
            elif p.size > MERGE_SIZE:
                directions[i] = self._large_direction(p, g, m, v, row, col, chunk_size)
                runs.append([])
            else:
                runs[-1].append(i)
                feats[i] = _features(p32, g.astype(jnp.float32), m, v, fg, row, col)
        for run in runs:
            if not run:
                continue
            outputs = mlp_many(
                [feats[i] for i in run],
                self.w0,
                self.b0,
                self._rest,
                axes_list=[_mlp_axes(path_leaves[i][1].ndim) for i in run],
                eps=_EPS,
            )
            directions.update((i, direction) for i, (direction,) in zip(run, outputs))
        order = sorted(directions)
        steps = self._steps([directions[i] for i in order])
        for i, (_, step) in zip(order, steps):
            p = path_leaves[i][1]
            p32 = p.astype(jnp.float32)
            if self.decay_after_step:
                # (p - lr*s)(1 - lr*wd) - p, written so that wd = 0 gives -lr*s exactly.
                u = -(lr * step) - lr * self.weight_decay * (p32 - lr * step)
            else:
                u = -(lr * (step + self.weight_decay * p32))
            updates[i] = u.reshape(p.shape).astype(p.dtype)
        state = eqx.tree_at(lambda s: s.iteration, state, t + 1)
        return jax.tree.unflatten(treedef, updates), state

    def _large_direction(self, p, g, m, v, v_row, v_col, chunk_size):
        """The MLP direction of one large matrix (or stack of matrices), streamed through the
        MLP in chunks: only the direction itself is materialised."""
        dims = factored_dims(p.shape)
        assert dims is not None
        rowf, colf, row, col = factored_features(v_row, v_col, dims)
        (direction,) = streamed_mlp(
            _dense_channels,
            (p, g, m, v, rowf, colf),
            dense_rows=_FACTORED_DENSE_ROWS,
            row=row,
            col=col,
            row_rows=_ROW_ROWS,
            col_rows=_COL_ROWS,
            w0=self.w0,
            bias0=self.b0,
            rest=self._rest,
            finish=lambda outputs, *_: outputs,
            axes=_mlp_axes(p.ndim),
            eps=_EPS,
            like=p,
            out_dtypes=(jnp.float32,),
            chunk_size=default_chunk_size() if chunk_size is None else chunk_size,
        )
        return direction

    def tensor_outputs(
        self,
        p: Float[ArrayLike, "..."],
        g: Float[ArrayLike, "..."],
        m: Float[ArrayLike, "..."],
        rms: Float[ArrayLike, "..."],
        fac_g: Float[ArrayLike, "..."],
        v_row: Float[ArrayLike, "..."],
        v_col: Float[ArrayLike, "..."],
        v_diag: Float[ArrayLike, "..."] | None = None,
    ) -> dict[str, Float[Array, "..."]]:
        """The network's view of one parameter tensor, for inspection and testing.

        The Celo2 path is evaluated for any tensor, including those `update` sends to AdamW.

        **Arguments:**

        - `p`, `g`: the parameter (before the update) and its preprocessed gradient, shape `S`.
        - `m`, `rms`, `fac_g`, `v_row`, `v_col`: the post-update accumulators of this tensor and
          its Adafactor-normalised gradient (shapes as in `LOState`).
        - `v_diag`: unused (Celo2 has no diagonal-Adafactor features); accepted for symmetry.

        **Returns:**

        A dict with `features` (`S + (30,)` for rank $\\geq 2$, `S + (15,)` otherwise, the
        normalised MLP input), `direction` (MLP output 0), `step_ns` (rank $\\geq 2$ only: NS5 of
        the direction) and `step` (the final RMS-normalised step $s$), each of shape `S` unless
        stated.
        """
        del v_diag
        p, g, m, rms, fac_g, v_row, v_col = (
            jnp.asarray(x, jnp.float32) for x in (p, g, m, rms, fac_g, v_row, v_col)
        )
        shape = p.shape
        if p.ndim == 0:
            p, g, m, rms, fac_g = (x[None] for x in (p, g, m, rms, fac_g))
        feats = _features(p, g, m, rms, fac_g, v_row, v_col)
        explicit = explicit_features(feats, _mlp_axes(p.ndim), _EPS)
        direction = self._direction(feats, p.ndim)
        ((step_ns, step),) = self._steps([direction])
        out = {
            "features": explicit.reshape(shape + explicit.shape[-1:]),
            "direction": direction.reshape(shape),
            "step": step.reshape(shape),
        }
        if p.ndim >= 2:
            out["step_ns"] = step_ns
        return out
