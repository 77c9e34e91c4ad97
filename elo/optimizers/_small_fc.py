"""`small_fc`: the per-parameter MLP learned optimizer with Adafactor features."""

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float, Int, PRNGKeyArray, PyTree

from .._custom_types import Params, Updates
from ._accumulators import factored_dims, LOState, safe_rsqrt
from ._chunked import check_chunk_size, default_chunk_size, factored_features
from ._mlp_optimizer import AbstractMLPOptimizer
from ._network import (
    bcast,
    explicit_features,
    MERGE_SIZE,
    mlp,
    mlp_many,
    streamed_mlp,
    tanh_embedding,
    TensorFeatures,
    truncated_normal,
)
from ._preprocess import check_structure
from ._weights import hidden_size_of, read_weights, split_config, WEIGHT_NAMES


_NUM_FEATURES = 39
_NUM_NORMALISED = 28
# First-layer rows (see the feature table in the docs) of the channels that are computed on the
# full tensor, and of those that are constant along the largest / second-largest axis.
_FACTORED_DENSE_ROWS = tuple(range(13)) + (25, 26, 27)
_ROW_ROWS = (13, 14, 15, 19, 20, 21)
_COL_ROWS = (16, 17, 18, 22, 23, 24)
_UNFACTORED_DENSE_ROWS = tuple(range(_NUM_NORMALISED))
_EPS = 1e-5


def _cosine(step, total, start: float, end: float):
    fraction = jnp.clip(step / (total - 1), 0.0, 1.0)
    cosine_decay = 0.5 * (1.0 + jnp.cos(jnp.pi * fraction))
    return end + (start - end) * cosine_decay


def _features(p, g, m, v, fac_g, v_row, v_col, v_diag) -> TensorFeatures:
    rsqrt_v = lax.rsqrt(v + 1e-6)
    base = (g[..., None], p[..., None], m, v, m * rsqrt_v, rsqrt_v, fac_g)
    dims = factored_dims(p.shape)
    if dims is None:
        rsqrt_diag = lax.rsqrt(v_diag + 1e-8)
        fac_mom = m * (v_diag + 1e-6) ** -0.5
        dense = base + (v_diag, v_diag, rsqrt_diag, rsqrt_diag, fac_mom)
        return TensorFeatures(dense, None, None, _UNFACTORED_DENSE_ROWS, (), ())
    d1, d0 = dims
    reduced_d1 = d1 - 1 if d1 > d0 else d1
    row_factor = safe_rsqrt(v_row / (jnp.mean(v_row, axis=reduced_d1, keepdims=True) + 1e-9))
    col_factor = safe_rsqrt(v_col)
    fac_mom = m * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1)
    dense = base + (fac_mom,)
    row = jnp.expand_dims(jnp.concatenate([v_row, lax.rsqrt(v_row + 1e-8)], -1), d0)
    col = jnp.expand_dims(jnp.concatenate([v_col, lax.rsqrt(v_col + 1e-8)], -1), d1)
    return TensorFeatures(dense, row, col, _FACTORED_DENSE_ROWS, _ROW_ROWS, _COL_ROWS)


def _dense_channels(p, g, m, v, rowf, colf, diag):
    """The full-size channels of `_features`, from per-element inputs (any float dtype): the
    Adafactor row and column factors `rowf`, `colf` broadcast to the tensor's rank (rank
    >= 2), or the unfactored accumulator `diag` (rank 1). `g` may be the raw gradient: it is
    cleaned here as `preprocess_grads` cleans it (a no-op on a cleaned one)."""
    g = jnp.nan_to_num(g)
    p, g, m, v = (x.astype(jnp.float32) for x in (p, g, m, v))
    if v.ndim == p.ndim:  # the streamed path passes the second moment without its decay axis
        v = v[..., None]
    gc = g[..., None]
    rsqrt_v = lax.rsqrt(v + 1e-6)
    if diag is None:
        fac_g = gc * rowf * colf
        base = (gc, p[..., None], m, v, m * rsqrt_v, rsqrt_v, fac_g)
        return base + (m * rowf * colf,)
    fac_g = gc * safe_rsqrt(diag + 1e-9)
    base = (gc, p[..., None], m, v, m * rsqrt_v, rsqrt_v, fac_g)
    rsqrt_diag = lax.rsqrt(diag + 1e-8)
    return base + (diag, diag, rsqrt_diag, rsqrt_diag, m * (diag + 1e-6) ** -0.5)


class SmallFC(AbstractMLPOptimizer):
    """ELO's `small_fc` learned optimizer (`ELO_AdafacMLPLOpt`; Metz et al.'s `small_fc_lopt`).

    Every parameter tensor goes through the same MLP $39 \\to 32 \\to 32 \\to 2$ (ReLU), applied
    per element. With $x$ the 39 features of an element (28 accumulator statistics, each
    normalised by its RMS over the whole tensor, and 11 time features), the MLP outputs a
    direction $d$ and a log-magnitude $\\mu$, and

    $$\\theta \\leftarrow \\theta - \\eta_t\\left(d \\, e^{\\lambda_2 \\mu} +
    \\lambda_{wd}\\, \\theta\\right),$$

    with $\\eta_t$ the learning-rate schedule of `learning_rate`. See the API page for the
    feature table. Used through [`elo.as_optax`][], updates past the `num_steps` given to
    `init` are computed as that of step `num_steps - 1` (meta-training's inner problems, which
    the resume buffer carries past their horizon, keep their own step).

    The meta-parameters are the arrays `w0, b0, w1, b1, w2, b2` (haiku layout, `W: [in, out]`).
    Every other field is static; the defaults are those of ELO's `elo_small_fc_mlp.py` config.

    !!! example

        ```python
        lo = SmallFC(key=jax.random.key(0))
        state = lo.init(params, num_steps=1000)
        updates, state = lo.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        ```
    """

    w0: Float[Array, "39 hidden"]
    b0: Float[Array, " hidden"]
    w1: Float[Array, "hidden hidden"]
    b1: Float[Array, " hidden"]
    w2: Float[Array, "hidden 2"]
    b2: Float[Array, " 2"]
    step_mult: float = eqx.field(static=True)
    exp_mult: float = eqx.field(static=True)
    momentum_decays: tuple[float, ...] = eqx.field(static=True)
    rms_decays: tuple[float, ...] = eqx.field(static=True)
    adafactor_decays: tuple[float, ...] = eqx.field(static=True)
    init_lr: float = eqx.field(static=True)
    warmup_fraction: float = eqx.field(static=True)
    warmup_steps: int = eqx.field(static=True)
    use_cosine_schedule: bool = eqx.field(static=True)
    step_mult_min: float = eqx.field(static=True)
    cosine_steps: int | None = eqx.field(static=True)
    weight_decay: float = eqx.field(static=True)
    clip_grad: bool = eqx.field(static=True)
    clip_norm: float = eqx.field(static=True)

    imitation_magnitude: ClassVar[Literal["norm", "elementwise"]] = "norm"
    num_features: ClassVar[int] = _NUM_FEATURES

    def __init__(
        self,
        *,
        key: PRNGKeyArray | None = None,
        weights: Mapping[str, Any] | None = None,
        hidden_size: int = 32,
        step_mult: float = 1e-3,
        exp_mult: float = 1e-3,
        momentum_decays: tuple[float, ...] = (0.9, 0.99, 0.999),
        rms_decays: tuple[float, ...] = (0.999,),
        adafactor_decays: tuple[float, ...] = (0.9, 0.99, 0.999),
        init_lr: float = 0.0,
        warmup_fraction: float = 0.05,
        warmup_steps: int = 0,
        use_cosine_schedule: bool = False,
        step_mult_min: float = 1e-4,
        cosine_steps: int | None = None,
        weight_decay: float = 0.0,
        clip_grad: bool = False,
        clip_norm: float = 1.0,
    ):
        """**Arguments:**

        - `key`: initialises the MLP: every weight is drawn from a normal distribution with
          standard deviation $1/\\sqrt{\\text{fan\\_in}}$ truncated at $\\pm 2\\sigma$ (not
          rescaled, as haiku's `TruncatedNormal`); biases are 0. Not needed with `weights`.
        - `weights`: MLP weights in the neutral layout (`w0 [39, h]`, `b0 [h]`, `w1 [h, h]`,
          `b1 [h]`, `w2 [h, 2]`, `b2 [2]`), e.g. from `export_weights` or a reference checkpoint.
        - `hidden_size`: $h$, the width of the two hidden layers (32).
        - `step_mult`: $\\lambda_1$, the learning rate after warmup (1e-3).
        - `exp_mult`: $\\lambda_2$, the scale of the magnitude exponent (1e-3).
        - `momentum_decays`, `rms_decays`, `adafactor_decays`: the accumulator decays
          ((0.9, 0.99, 0.999), (0.999,), (0.9, 0.99, 0.999)). ELO's ViT config uses
          `rms_decays=(0.95,)`; run a trained optimizer with the decays it was trained with.
        - `init_lr`, `warmup_fraction`, `warmup_steps`: linear warmup from `init_lr` to
          `step_mult` over $W = \\max(\\text{warmup\\_fraction}\\cdot N, 1)$ steps, or over
          `max(warmup_steps, 1)` steps when `warmup_fraction` is 0 (0.0, 0.05, 0).
        - `use_cosine_schedule`, `step_mult_min`, `cosine_steps`: after warmup, the cosine from
          `step_mult` at step 0 to `step_mult_min` at step `cosine_steps` − 1 (the run length
          $N$ if `None`; the reference uses 10 000 in meta-training) (False, 1e-4, None). The
          cosine is measured from step 0, as in the reference: the warmup replaces its start.
        - `weight_decay`: decoupled weight decay, multiplied by the learning rate (0.0).
        - `clip_grad`, `clip_norm`: clip the gradients by global norm first (False, 1.0).
        """
        shapes = {
            "w0": (_NUM_FEATURES, hidden_size),
            "b0": (hidden_size,),
            "w1": (hidden_size, hidden_size),
            "b1": (hidden_size,),
            "w2": (hidden_size, 2),
            "b2": (2,),
        }
        if weights is None:
            if key is None:
                raise ValueError("SmallFC needs a `key` to initialise its weights (or `weights`).")
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
            w = {
                k: jnp.asarray(v) for k, v in read_weights(weights, shapes, owner="SmallFC").items()
            }
        self.w0, self.b0, self.w1, self.b1, self.w2, self.b2 = (w[k] for k in WEIGHT_NAMES)
        self.step_mult = float(step_mult)
        self.exp_mult = float(exp_mult)
        self.momentum_decays = tuple(float(b) for b in momentum_decays)
        self.rms_decays = tuple(float(b) for b in rms_decays)
        self.adafactor_decays = tuple(float(b) for b in adafactor_decays)
        self.init_lr = float(init_lr)
        self.warmup_fraction = float(warmup_fraction)
        self.warmup_steps = int(warmup_steps)
        self.use_cosine_schedule = bool(use_cosine_schedule)
        self.step_mult_min = float(step_mult_min)
        self.cosine_steps = None if cosine_steps is None else int(cosine_steps)
        self.weight_decay = float(weight_decay)
        self.clip_grad = bool(clip_grad)
        self.clip_norm = float(clip_norm)

    def __check_init__(self):
        if self.cosine_steps is not None and self.cosine_steps < 2:
            raise ValueError(f"SmallFC.cosine_steps must be >= 2 or None; got {self.cosine_steps}.")

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        key: PRNGKeyArray | None = None,
        weights: Mapping[str, Any] | None = None,
    ) -> "SmallFC":
        """Build from the keyword arguments of the reference `ELO_AdafacMLPLOpt`.

        **Arguments:**

        - `config`: the reference constructor kwargs (e.g. the `config` of a parity file).
          Missing keys take the reference class defaults (which differ from this class's only
          in `hidden_size = 4`; with `weights`, the hidden size is read from them). Expert
          settings and equivalent code-path switches (`concat_weights`, ...) are ignored;
          `meta_train=True` makes the optional cosine schedule run over 10 000 steps, as in the
          reference; unsupported values (e.g. `hidden_layers != 2`) raise a `ValueError`; unknown
          keys are ignored with a warning.
        - `key`, `weights`: as for the constructor.

        **Returns:**

        A `SmallFC`.
        """
        kwargs = split_config(
            config,
            owner="SmallFC.from_config",
            renames={
                "exp_mult": "exp_mult",
                "step_mult": "step_mult",
                "init_lr": "init_lr",
                "warmup_fraction": "warmup_fraction",
                "warmup_steps": "warmup_steps",
                "weight_decay": "weight_decay",
                "hidden_size": "hidden_size",
                "initial_momentum_decays": "momentum_decays",
                "initial_rms_decays": "rms_decays",
                "initial_adafactor_decays": "adafactor_decays",
                "clip_grad": "clip_grad",
                "clip_norm": "clip_norm",
                "use_lo_cosine_scheduler": "use_cosine_schedule",
                "step_mult_min": "step_mult_min",
            },
            required={"hidden_layers": 2},
            ignored=frozenset(
                {
                    "concat_weights",
                    "make_separate_weights",
                    "split_weights",
                    "meta_train",
                    "expert_lr_max",
                    "expert_lr_min",
                    "expert_lr_decay_steps",
                    "expert_weight_decay",
                    "expert_optim",
                    "muon_expert_adamlr_scaler",
                }
            ),
        )
        if config.get("meta_train", False):
            kwargs["cosine_steps"] = 10_000
        if "hidden_size" not in kwargs:
            kwargs["hidden_size"] = 4 if weights is None else hidden_size_of(weights)
        return cls(key=key, weights=weights, **kwargs)

    def learning_rate(
        self, iteration: Int[ArrayLike, ""], num_steps: Int[ArrayLike, ""]
    ) -> Float[Array, ""]:
        """$\\eta_t$: linear warmup from `init_lr` to `step_mult` while $t < W$, then `step_mult`
        (or, with `use_cosine_schedule`, the cosine from `step_mult` at $t = 0$ to
        `step_mult_min`, measured from step 0). Note $\\eta_0 = $ `init_lr`."""
        t = jnp.asarray(iteration, jnp.int32)
        n = jnp.asarray(num_steps, jnp.int32)
        if self.use_cosine_schedule:
            total = n if self.cosine_steps is None else self.cosine_steps
            base = _cosine(t, total, self.step_mult, self.step_mult_min)
        else:
            base = jnp.asarray(self.step_mult, jnp.float32)
        warmup = self.warmup_fraction * n if self.warmup_fraction > 0 else self.warmup_steps
        warmup = jnp.maximum(jnp.asarray(warmup, jnp.float32), 1.0)
        tf = t.astype(jnp.float32)
        ramp = self.init_lr + (self.step_mult - self.init_lr) * jnp.minimum(tf / warmup, 1.0)
        return jnp.where(tf < warmup, ramp, base).astype(jnp.float32)

    def imitation_leaves(self, params: Params) -> PyTree[bool]:
        """Every parameter takes part in small_fc's imitation losses."""
        return jax.tree.map(lambda _: True, params)

    @property
    def expert_b2(self) -> float:
        """`rms_decays[0]`."""
        return self.rms_decays[0]

    def _rest(self, h):
        """The layers after the first: hidden activations `[..., h]` to (direction, magnitude)."""
        h = jax.nn.relu(h @ self.w1 + bcast(self.b1, h.ndim))
        out = h @ self.w2 + bcast(self.b2, h.ndim)
        return out[..., 0], out[..., 1]

    def _mlp(self, feats: TensorFeatures, bias0, ndim: int):
        return mlp(feats, self.w0, bias0, self._rest, axes=tuple(range(ndim)), eps=_EPS)

    def _time_bias(self, iteration):
        return tanh_embedding(iteration) @ self.w0[_NUM_NORMALISED:] + self.b0

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
        return self._update(grads, state, params, chunk_size=chunk_size, streamed_grads=grads)

    def update(
        self, grads: Updates, state: LOState, params: Params, *, chunk_size: int | None = None
    ) -> tuple[Updates, LOState]:
        """Compute one update: `update_preprocessed(preprocess_grads(grads), ...)`, bit for bit.

        Without gradient clipping, each large tensor's chunks clean its raw gradient themselves,
        so no cleaned copy of the whole tensor is held (4 B per parameter less).

        **Arguments:**

        - `grads`: gradients, structured like `params`.
        - `state`: the current optimizer state.
        - `params`: the current parameters.
        - `chunk_size`: how many elements of a large tensor are processed at once (see
          [`elo.as_optax`][]).

        **Returns:**

        `(updates, new_state)`, where `params + updates` are the new parameters.
        """
        cleaned = self.preprocess_grads(grads)
        streamed = cleaned if self.clip_grad else grads
        return self._update(cleaned, state, params, chunk_size=chunk_size, streamed_grads=streamed)

    def _update(self, grads, state, params, *, chunk_size, streamed_grads):
        check_structure(grads, params, state.mom, owner="SmallFC")
        chunk_size = check_chunk_size(chunk_size, owner="SmallFC.update")
        t = state.iteration
        state, fac_g = self.accumulate(state, grads)
        lr = self.learning_rate(t, state.num_steps)
        const = self._time_bias(t)
        leaves, treedef = jax.tree.flatten(params)
        others = [
            treedef.flatten_up_to(x)
            for x in (grads, state.mom, state.rms, fac_g, state.v_row, state.v_col, state.v_diag)
        ]
        streamed = treedef.flatten_up_to(streamed_grads)
        updates: list[Array | None] = [None] * len(leaves)
        # Runs of consecutive small tensors share their matmuls (`mlp_many`); every large
        # tensor is streamed through the MLP chunk by chunk on its own.
        runs: list[list[int]] = [[]]
        for i, (p, g, m, v, fg, row, col, diag) in enumerate(zip(leaves, *others)):
            if p.size > MERGE_SIZE:
                g = streamed[i]
                updates[i] = self._large_update(p, g, m, v, row, col, diag, const, lr, chunk_size)
                runs.append([])
            else:
                runs[-1].append(i)
        for run in runs:
            if not run:
                continue
            feats, tensors = [], []
            for i in run:
                p, g, m, v, fg, row, col, diag = (leaves[i], *(x[i] for x in others))
                p32, g32 = p.astype(jnp.float32), g.astype(jnp.float32)
                m, v = m.astype(jnp.float32), v.astype(jnp.float32)
                if p.ndim == 0:
                    p32, g32, m, v, fg, diag = (x[None] for x in (p32, g32, m, v, fg, diag))
                feats.append(_features(p32, g32, m, v, fg, row, col, diag))
                tensors.append(p32)
            outputs = mlp_many(
                feats,
                self.w0,
                const,
                self._rest,
                axes_list=[tuple(range(p32.ndim)) for p32 in tensors],
                eps=_EPS,
            )
            for i, p32, (d, mg) in zip(run, tensors, outputs):
                p = leaves[i]
                updates[i] = self._finish(d, mg, p32, lr).reshape(p.shape).astype(p.dtype)
        state = eqx.tree_at(lambda s: s.iteration, state, t + 1)
        return jax.tree.unflatten(treedef, updates), state

    def _finish(self, d, mg, p32, lr):
        step = d * jnp.exp(mg * self.exp_mult)
        return -((step + self.weight_decay * p32) * lr)

    def _large_update(self, p, g, m, v, v_row, v_col, v_diag, const, lr, chunk_size):
        """The update of one large tensor, streamed through the MLP in chunks: nothing of the
        size of the tensor is materialised but the update itself."""
        shape = p.shape
        if p.ndim == 0:
            p, g, m, v, v_diag = (x[None] for x in (p, g, m, v, v_diag))
        dims = factored_dims(p.shape)
        rowf = colf = row = col = diag = None
        if dims is None:
            diag = v_diag
        else:
            rowf, colf, row, col = factored_features(v_row, v_col, dims)
        dense_rows = _UNFACTORED_DENSE_ROWS if dims is None else _FACTORED_DENSE_ROWS

        def finish(outputs, p, *_):
            d, mg = outputs
            return (self._finish(d, mg, p.astype(jnp.float32), lr).astype(p.dtype),)

        (update,) = streamed_mlp(
            _dense_channels,
            (p, g, m, v[..., 0], rowf, colf, diag),
            dense_rows=dense_rows,
            row=row,
            col=col,
            row_rows=_ROW_ROWS,
            col_rows=_COL_ROWS,
            w0=self.w0,
            bias0=const,
            rest=self._rest,
            finish=finish,
            axes=tuple(range(p.ndim)),
            eps=_EPS,
            like=p,
            out_dtypes=(p.dtype,),
            chunk_size=default_chunk_size() if chunk_size is None else chunk_size,
        )
        return update.reshape(shape)

    def tensor_outputs(
        self,
        p: Float[ArrayLike, "..."],
        g: Float[ArrayLike, "..."],
        m: Float[ArrayLike, "..."],
        rms: Float[ArrayLike, "..."],
        fac_g: Float[ArrayLike, "..."],
        v_row: Float[ArrayLike, "..."],
        v_col: Float[ArrayLike, "..."],
        v_diag: Float[ArrayLike, "..."],
        *,
        iteration: Int[ArrayLike, ""],
    ) -> dict[str, Float[Array, "..."]]:
        """The network's view of one parameter tensor, for inspection and testing.

        **Arguments:**

        - `p`, `g`: the parameter (before the update) and its preprocessed gradient, shape `S`.
        - `m`, `rms`, `fac_g`, `v_row`, `v_col`, `v_diag`: the post-update accumulators of this
          tensor and its Adafactor-normalised gradient (shapes as in `LOState`).
        - `iteration`: the 0-based step $t$ (for the time features).

        **Returns:**

        A dict with `features` (`S + (39,)`, the normalised MLP input), `direction` and
        `magnitude` (the two MLP outputs) and `step` ($d\\,e^{\\lambda_2\\mu}$, before the
        learning rate and weight decay), each of shape `S` unless stated.
        """
        p, g, m, rms, fac_g, v_row, v_col, v_diag = (
            jnp.asarray(x, jnp.float32) for x in (p, g, m, rms, fac_g, v_row, v_col, v_diag)
        )
        shape = p.shape
        if p.ndim == 0:
            p, g, m, rms, fac_g, v_diag = (x[None] for x in (p, g, m, rms, fac_g, v_diag))
        iteration = jnp.asarray(iteration, jnp.int32)
        feats = _features(p, g, m, rms, fac_g, v_row, v_col, v_diag)
        explicit = explicit_features(feats, tuple(range(p.ndim)), _EPS)
        time = jnp.broadcast_to(tanh_embedding(iteration), p.shape + (11,))
        d, mg = self._mlp(feats, self._time_bias(iteration), p.ndim)
        return {
            "features": jnp.concatenate([explicit, time], -1).reshape(shape + (_NUM_FEATURES,)),
            "direction": d.reshape(shape),
            "magnitude": mg.reshape(shape),
            "step": (d * jnp.exp(mg * self.exp_mult)).reshape(shape),
        }
