"""The failure-aware resume buffer: where inner runs restart from when they are not fresh."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int, Real, Shaped

from .._checks import is_int_at_least
from .._custom_types import PRNGKeyArray, PyTree


def _check_num_slots(num_slots) -> None:
    if not is_int_at_least(num_slots, 1):
        raise ValueError(
            f"`ResumeBuffer.num_slots` must be an integer >= 1; got num_slots={num_slots!r}."
        )


class ResumeBuffer(eqx.Module):
    r"""A FIFO ring of $B$ snapshots of one particle's inner run.

    A snapshot is any pytree of arrays: the optimizee parameters, the learned optimizer's and
    expert's states, the inner step, the task's augmentation scale, the PES accumulator $\xi$, ...
    `slots` holds $B$ of them stacked along a new leading axis. Slots are written in the order
    $0, 1, \dots, B-1, 0, 1, \dots$, so the filled slots are always `0, ..., num_filled - 1`.

    A buffer belongs to one particle; `jax.vmap` the functions of this module over particles.
    Create one with `ResumeBuffer.empty`, then use `buffer_push`, `resume_decision` and
    `buffer_pop`.

    **Fields:**

    - `slots`: the stored snapshots, each leaf with leading axis of size $B$.
    - `num_filled`: how many slots hold a snapshot, in $[0, B]$ (`int32`).
    - `next_slot`: the slot the next push writes, in $[0, B)$ (`int32`).
    - `num_slots`: $B$ (static).
    """

    slots: PyTree[Shaped[Array, "slots ..."]]
    num_filled: Int[Array, ""]
    next_slot: Int[Array, ""]
    num_slots: int = eqx.field(static=True)

    def __check_init__(self):
        _check_num_slots(self.num_slots)

    @classmethod
    def empty(cls, example_snapshot: PyTree[ArrayLike], num_slots: int) -> "ResumeBuffer":
        """An empty buffer for snapshots structured like `example_snapshot`.

        The slots are zero-filled (zero keys for PRNG key leaves) and `num_filled = 0`.

        **Arguments:**

        - `example_snapshot`: a pytree of arrays with the structure, shapes and dtypes of the
          snapshots to store. Its values are not used.
        - `num_slots`: $B \\geq 1$, the number of snapshots kept.

        **Returns:**

        A `ResumeBuffer`.
        """

        def zeros(x):
            x = jnp.asarray(x)
            return jnp.zeros_like(x, shape=(num_slots, *x.shape))

        _check_num_slots(num_slots)
        return cls(
            slots=jax.tree.map(zeros, example_snapshot),
            num_filled=jnp.array(0, jnp.int32),
            next_slot=jnp.array(0, jnp.int32),
            num_slots=num_slots,
        )


def _check_snapshot(buffer: ResumeBuffer, snapshot) -> None:
    """Raise a `ValueError` if `snapshot` does not fit the buffer's slots (a trace-time check)."""
    slots_def = jax.tree.structure(buffer.slots)
    snap_def = jax.tree.structure(snapshot)
    if slots_def != snap_def:
        raise ValueError(
            "`buffer_push`: the snapshot's pytree structure does not match the buffer's.\n"
            f"buffer: {slots_def}\nsnapshot: {snap_def}"
        )
    for (path, x), s in zip(
        jax.tree_util.tree_flatten_with_path(snapshot)[0], jax.tree.leaves(buffer.slots)
    ):
        name = jax.tree_util.keystr(path)
        shape = jnp.shape(x)
        if shape != s.shape[1:]:
            raise ValueError(
                f"`buffer_push`: snapshot leaf {name} has shape {shape}; the buffer stores "
                f"shape {s.shape[1:]}."
            )
        aval = jax.typeof(x)
        # Python scalars and other weakly typed values take the slot's dtype.
        if not aval.weak_type and aval.dtype != s.dtype:
            raise ValueError(
                f"`buffer_push`: snapshot leaf {name} has dtype {aval.dtype}; the buffer stores "
                f"dtype {s.dtype}."
            )


def buffer_push(
    buffer: ResumeBuffer, snapshot: PyTree[ArrayLike], push: Bool[ArrayLike, ""]
) -> ResumeBuffer:
    """Write `snapshot` into the next slot if `push` holds; otherwise leave the buffer unchanged.

    When full, the oldest snapshot is overwritten (FIFO). There is no Python branch on `push`: the
    write is a `dynamic_update_index` of either the new or the old value, so this is safe under
    `jax.jit`, `jax.vmap` and `shard_map`, and costs one slot's worth of memory traffic.

    What to push is the caller's choice. ELO pushes, after each truncation window, the snapshot
    taken at the **start** of that window when `should_push` holds.

    **Arguments:**

    - `buffer`: the buffer.
    - `snapshot`: a pytree with the structure, shapes and dtypes of `buffer.slots` without the
      leading axis. A mismatch raises a `ValueError` at trace time.
    - `push`: a boolean scalar.

    **Returns:**

    The updated buffer. Stored values are bit-for-bit those of `snapshot`.
    """
    _check_snapshot(buffer, snapshot)
    push = jnp.asarray(push, bool)
    idx = buffer.next_slot

    def write(slots, x):
        x = jnp.asarray(x, slots.dtype)
        old = jax.lax.dynamic_index_in_dim(slots, idx, 0, keepdims=False)
        return jax.lax.dynamic_update_index_in_dim(slots, jnp.where(push, x, old), idx, 0)

    slots = jax.tree.map(write, buffer.slots, snapshot)
    num_filled = jnp.where(
        push, jnp.minimum(buffer.num_filled + 1, buffer.num_slots), buffer.num_filled
    )
    next_slot = jnp.where(push, (idx + 1) % buffer.num_slots, idx)
    return ResumeBuffer(
        slots=slots,
        num_filled=num_filled.astype(jnp.int32),
        next_slot=next_slot.astype(jnp.int32),
        num_slots=buffer.num_slots,
    )


def buffer_pop(buffer: ResumeBuffer, *, key: PRNGKeyArray) -> tuple[PyTree, Int[Array, ""]]:
    """Read a snapshot from a slot drawn uniformly among the filled ones.

    The snapshot stays in the buffer ("pop" as in "pop back to an earlier state"). On an empty
    buffer this returns the zero-filled slot 0; use `resume_decision`, which never resumes from an
    empty buffer, to decide whether to use the result.

    **Arguments:**

    - `buffer`: the buffer.
    - `key`: a JAX PRNG key.

    **Returns:**

    `(snapshot, slot)`: the stored pytree and the `int32` index it was read from, in
    `[0, max(num_filled, 1))`.
    """
    slot = jax.random.randint(key, (), 0, jnp.maximum(buffer.num_filled, 1), dtype=jnp.int32)
    snapshot = jax.tree.map(
        lambda s: jax.lax.dynamic_index_in_dim(s, slot, 0, keepdims=False), buffer.slots
    )
    return snapshot, slot


def resume_decision(
    buffer: ResumeBuffer, resume_prob: Real[ArrayLike, ""], *, key: PRNGKeyArray
) -> Bool[Array, ""]:
    r"""Whether a reset resumes from the buffer rather than starting a fresh run.

    Resumes with probability $P_B$ = `resume_prob` if the buffer holds at least one snapshot, and
    never when it is empty (the run then starts fresh). $P_B = 0$ never resumes and $P_B = 1$
    always resumes once the buffer is filled.

    The reference configures $1 - P_B$ instead (its `thred` is the probability of a fresh init),
    and pre-fills the buffer with copies of the initial state so it is never empty; here an empty
    buffer falls back to a fresh init.

    **Arguments:**

    - `buffer`: the buffer.
    - `resume_prob`: $P_B$, a probability (a traced value is fine).
    - `key`: a JAX PRNG key.

    **Returns:**

    A boolean scalar.
    """
    u = jax.random.uniform(key, ())
    return (buffer.num_filled > 0) & (u < resume_prob)


def should_push(
    max_before: Real[ArrayLike, "*batch"],
    max_after: Real[ArrayLike, "*batch"],
    unroll_ended: Bool[ArrayLike, "*batch"],
    failed: Bool[ArrayLike, "*batch"] | None = None,
) -> Bool[Array, "*batch"]:
    r"""ELO's push rule, evaluated after each truncation window of $R$ inner steps.

    Push if the running maximum $M$ of the difficulty score rose during the window (a new record
    draw-up: the run is struggling) or if a run ended in the window, unless the window belongs to
    a failed run: `push = ((max_after > max_before) | unroll_ended) & ~failed`.

    The snapshot to push is the one taken at the **start** of the window (the caller keeps it).
    This is the implementable, online form of the paper's rule "push $s_{\max(K, n^* - R)}$ with
    $n^* = \arg\max_n V_n$": the last window that pushes because of a record is the one containing
    $n^*$ (see `record_window`). For antithetic pairs the reference passes the mean of the two
    sides' maxima.

    **Arguments:**

    - `max_before`: $M$ at the start of the window.
    - `max_after`: $M$ at the end of the window.
    - `unroll_ended`: whether a run ended (was done) during the window.
    - `failed`: whether the window belongs to a failed run, one the divergence rule ended or
      that went non-finite in it, or that started above the divergence bound (`None`: never,
      as in the paper and the reference).

    **Returns:**

    A boolean array, elementwise.
    """
    push = (jnp.asarray(max_after) > jnp.asarray(max_before)) | jnp.asarray(unroll_ended, bool)
    return push if failed is None else push & ~jnp.asarray(failed, bool)


def record_window(
    scores: Real[ArrayLike, " steps *batch"], window_length: int
) -> Int[Array, "*batch"]:
    r"""The index of the truncation window that contains the record difficulty $n^*$.

    With windows $[wR, (w+1)R)$ aligned to the start of the run, this is
    $\lfloor n^* / R \rfloor$ with $n^* = \arg\max_n V_n$ (the first maximiser: the last time the
    running maximum rose). The snapshot `should_push` stores for it is the one at step $wR$.

    **Arguments:**

    - `scores`: the difficulty scores $V_n$ of one run, along the leading axis.
    - `window_length`: $R \geq 1$.

    **Returns:**

    The window index $w$ (`int32`).
    """
    if not is_int_at_least(window_length, 1):
        raise ValueError(
            f"`record_window`: `window_length` must be an integer >= 1; got {window_length!r}."
        )
    return (jnp.argmax(jnp.asarray(scores), axis=0) // window_length).astype(jnp.int32)
