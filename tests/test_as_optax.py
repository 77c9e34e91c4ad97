"""A learned optimizer used through plain optax code."""

import inspect

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from elo import as_optax, Celo2, SmallFC


# Compile quickly: these tests are dominated by XLA compile time, not by run time.
FAST = {"xla_backend_optimization_level": 0}


def probe_weights(lo, row):
    """Weights that make the MLP's direction output equal to input feature `row`.

    With `w0[row] = (1, -1)`, `w1` = identity on the first two units and `w2[:, 0] = (1, -1)`,
    the network computes `relu(f) - relu(-f) = f` (the parity suite's "probe weights").
    """
    w = {k: np.zeros_like(v) for k, v in lo.export_weights().items()}
    w["w0"][row, 0], w["w0"][row, 1] = 1.0, -1.0
    w["w1"][0, 0] = w["w1"][1, 1] = 1.0
    w["w2"][0, 0], w["w2"][1, 0] = 1.0, -1.0
    return w


def hand_designed(cls):
    """A stand-in for a trained optimizer: small_fc that steps along the RMS-normalised Adam
    direction m/sqrt(v) (feature row 6), or Celo2 that orthogonalises the momentum m (row 3),
    i.e. Muon."""
    if cls is SmallFC:
        lo = SmallFC(key=jax.random.key(0), step_mult=3e-2, warmup_fraction=0.0)
        return lo.load_weights(probe_weights(lo, 6))
    lo = Celo2(key=jax.random.key(0), init_lr=3e-2, peak_lr=3e-2, end_lr=3e-2, adam_lr_mult=1.0)
    return lo.load_weights(probe_weights(lo, 3))


def mlp_problem():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k1, (128, 8))
    y = jnp.sin(x @ jax.random.normal(k2, (8, 1)))
    ka, kb = jax.random.split(k3)
    params = {
        "hidden": {"w": jax.random.normal(ka, (8, 32)) / jnp.sqrt(8.0), "b": jnp.zeros(32)},
        "out": {"w": jax.random.normal(kb, (32, 1)) / jnp.sqrt(32.0), "b": jnp.zeros(1)},
    }

    def loss(params):
        h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"][None])
        return jnp.mean((h @ params["out"]["w"] + params["out"]["b"][None] - y) ** 2)

    return params, loss


@pytest.mark.parametrize("cls", [SmallFC, Celo2], ids=lambda c: c.__name__)
def test_trains_an_mlp_with_plain_optax_code(cls):
    params, loss = mlp_problem()
    num_steps = 60
    opt = as_optax(hand_designed(cls), num_steps=num_steps)
    assert isinstance(opt, optax.GradientTransformationExtraArgs)
    opt_state = opt.init(params)

    @jax.jit
    def train(params, opt_state):
        def step(carry, _):
            params, opt_state = carry
            value, grads = jax.value_and_grad(loss)(params)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), value

        return jax.lax.scan(step, (params, opt_state), length=num_steps)

    train = jax.jit(train.__wrapped__, compiler_options=FAST)
    (params, opt_state), losses = train(params, opt_state)
    losses = np.asarray(losses)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    assert int(opt_state.iteration) == num_steps


@pytest.mark.slow
def test_chains_with_other_transformations():
    params, loss = mlp_problem()
    lo = hand_designed(SmallFC)
    opt = optax.chain(optax.clip_by_global_norm(1.0), as_optax(lo, num_steps=5, learning_rate=3.0))
    grads = jax.tree.map(lambda g: 100.0 * g, jax.grad(loss)(params))
    assert optax.tree.norm(grads) > 1.0  # so that the clipping takes part
    updates, _ = opt.update(grads, opt.init(params), params)
    clipped = jax.tree.map(lambda g: g / optax.tree.norm(grads), grads)
    alone = as_optax(lo, num_steps=5, learning_rate=3.0)
    expected, _ = alone.update(clipped, alone.init(params), params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)
    # Clipping multiplies by 1/norm where the reference divides by it: equal to within an ulp of
    # the gradients, not bit for bit.
    assert eqx.tree_equal(updates, expected, rtol=1e-5, atol=1e-8)


def test_clear_errors():
    lo = SmallFC(key=jax.random.key(0))
    params = {"w": jnp.ones((3, 4))}
    with pytest.raises(TypeError, match="num_steps"):
        as_optax(lo)
    with pytest.raises(TypeError):
        as_optax(optax.adam(1e-3), num_steps=10)  # pyright: ignore
    opt = as_optax(lo, num_steps=10)
    state = opt.init(params)
    with pytest.raises(ValueError, match="params"):
        opt.update(params, state)
    with pytest.raises(ValueError, match="tree structure"):
        other = {"w": jnp.ones((3, 4)), "b": jnp.ones(4)}
        opt.update(other, state, other)
    # (Under the test suite's runtime type checking the annotations catch these first.)
    with pytest.raises(TypeError):
        opt.init({"w": jnp.ones((3, 4), jnp.int32)})
    with pytest.raises(TypeError):
        opt.update({"w": jnp.ones((3, 4), jnp.int32)}, state, params)


@pytest.mark.parametrize("num_steps", [0, -5, True, False])
def test_num_steps_must_be_a_positive_int(num_steps):
    with pytest.raises(ValueError, match=f"positive int.*got {num_steps!r}"):
        as_optax(SmallFC(key=jax.random.key(0)), num_steps=num_steps)


@pytest.mark.parametrize("num_steps", [10.5, 10.0, "10", np.array(10)])
def test_num_steps_of_another_type(num_steps):
    # The test suite type-checks `elo` at run time, which rejects these first; users without
    # runtime type checking get the library's own ValueError, which the unwrapped function shows.
    unchecked = inspect.unwrap(as_optax)
    with pytest.raises(ValueError, match="num_steps.*positive int"):
        unchecked(SmallFC(key=jax.random.key(0)), num_steps=num_steps)


@pytest.mark.parametrize("learning_rate", [0.0, -1.0, float("nan"), float("inf")])
def test_learning_rate_must_be_finite_and_positive(learning_rate):
    with pytest.raises(ValueError, match="learning_rate.*finite float > 0"):
        as_optax(SmallFC(key=jax.random.key(0)), num_steps=10, learning_rate=learning_rate)
    with pytest.raises(ValueError, match="learning_rate"):
        inspect.unwrap(as_optax)(SmallFC(key=jax.random.key(0)), num_steps=10, learning_rate=True)


def _updates_over(opt, steps, params, grads):
    state, out = opt.init(params), []
    for _ in range(steps):
        updates, state = opt.update(grads, state, params)
        out.append(updates)
    return out


@pytest.mark.slow
def test_learning_rate_may_be_a_traced_scalar_or_a_schedule():
    """A float, the same value as a scalar array traced under `jax.jit`, and a constant
    schedule give the same updates bit for bit; a schedule of the step number scales step t
    by its value at t, as `optax.scale_by_schedule` after the optimizer does."""
    params, loss = mlp_problem()
    grads = jax.grad(loss)(params)
    lo = SmallFC(key=jax.random.key(0))

    def run(learning_rate):
        return _updates_over(
            as_optax(lo, num_steps=4, learning_rate=learning_rate), 4, params, grads
        )

    # All compiled, so that all sum in the same order.
    by_array = jax.jit(run)(jnp.float32(3.0))
    by_float = jax.jit(lambda: run(3.0))()
    by_constant = jax.jit(lambda: run(lambda count: 3.0))()
    assert eqx.tree_equal(by_array, by_float, by_constant)

    def schedule(count):
        return 0.5 * (count + 1.0)

    scheduled = jax.jit(
        lambda: _updates_over(as_optax(lo, num_steps=4, learning_rate=schedule), 4, params, grads)
    )()
    chained = jax.jit(
        lambda: _updates_over(
            optax.chain(as_optax(lo, num_steps=4), optax.scale_by_schedule(schedule)),
            4,
            params,
            grads,
        )
    )()
    assert eqx.tree_equal(scheduled, chained)
    assert not eqx.tree_equal(scheduled, by_float)


@pytest.mark.parametrize(
    "learning_rate, message",
    [
        (jnp.ones(2), "float scalar"),
        (jnp.int32(3), "float scalar"),
        (jnp.float32(-1.0), "finite and > 0"),
        (np.float32("nan"), "finite float > 0"),
        ("3", "schedule"),
    ],
)
def test_learning_rate_arrays_and_other_types_are_checked(learning_rate, message):
    with pytest.raises(ValueError, match=message):
        inspect.unwrap(as_optax)(
            SmallFC(key=jax.random.key(0)), num_steps=10, learning_rate=learning_rate
        )


@pytest.mark.slow
@pytest.mark.parametrize("cls", [SmallFC, Celo2], ids=lambda c: c.__name__)
def test_learning_rate_scales_the_updates(cls):
    params, loss = mlp_problem()
    lo = hand_designed(cls)
    grads = jax.grad(loss)(params)
    state = lo.init(params, 10)
    # A few steps in, so that the schedule and the accumulators are past their first values.
    for _ in range(3):
        _, state = lo.update(grads, state, params)
    # `as_optax` compiles the learned optimizer's update (op by op, float sums may round
    # differently): the reference is that compiled update.
    reference, reference_state = eqx.filter_jit(lo.update)(grads, state, params)

    default = as_optax(lo, num_steps=10)
    updates, new_state = default.update(grads, state, params)
    assert eqx.tree_equal(updates, reference)  # the default changes nothing, bit for bit
    assert eqx.tree_equal(new_state, reference_state)

    tripled, tripled_state = as_optax(lo, num_steps=10, learning_rate=3.0).update(
        grads, state, params
    )
    assert eqx.tree_equal(tripled_state, reference_state)
    for u3, u in zip(jax.tree.leaves(tripled), jax.tree.leaves(reference)):
        assert np.any(u != 0)
        # Tolerance: 1 ulp (a float32 product `3 * u` is rounded once either way).
        np.testing.assert_array_max_ulp(np.asarray(u3), 3.0 * np.asarray(u), maxulp=1)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [SmallFC, Celo2], ids=lambda c: c.__name__)
def test_none_gradients_are_passed_through(cls):
    params, loss = mlp_problem()
    lo = hand_designed(cls)
    opt = as_optax(lo, num_steps=10)
    grads = jax.grad(loss)(params)
    frozen_w = {"hidden": grads["hidden"], "out": {"w": None, "b": grads["out"]["b"]}}
    state0 = opt.init(params)
    updates1, state1 = opt.update(frozen_w, state0, params)
    _, state2 = opt.update(grads, state1, params)
    updates3, state3 = opt.update(frozen_w, state2, params)
    assert updates1["out"]["w"] is None and updates3["out"]["w"] is None
    assert int(state3.iteration) == 3
    # A frozen parameter's state is left as it was; the others' moves on.
    assert eqx.tree_equal(state1.mom["out"]["w"], state0.mom["out"]["w"])
    assert eqx.tree_equal(state3.mom["out"]["w"], state2.mom["out"]["w"])
    assert not np.array_equal(state3.mom["out"]["b"], state2.mom["out"]["b"])
    # The other parameters are updated as if the frozen one were not there at all.
    without = {"hidden": params["hidden"], "out": {"w": None, "b": params["out"]["b"]}}
    expected, _ = eqx.filter_jit(lo.update)(frozen_w, lo.init(without, 10), without)
    assert eqx.tree_equal(updates1, expected, rtol=1e-6, atol=1e-9)
    # Nothing to train: nothing changes.
    nothing = jax.tree.map(lambda _: None, params)
    updates, same_state = opt.update(nothing, state3, params)
    assert jax.tree.leaves(updates) == [] and same_state is state3


@pytest.mark.slow
def test_masked_and_multi_transform():
    params, loss = mlp_problem()
    lo = hand_designed(SmallFC)
    grads = jax.grad(loss)(params)
    hidden_only = {"hidden": grads["hidden"], "out": {"w": None, "b": None}}
    alone = as_optax(lo, num_steps=10)
    expected, _ = alone.update(hidden_only, alone.init(params), params)

    masked = optax.masked(as_optax(lo, num_steps=10), {"hidden": True, "out": False})
    updates, state = masked.update(grads, masked.init(params), params)
    assert eqx.tree_equal(updates["hidden"], expected["hidden"])
    assert eqx.tree_equal(updates["out"], grads["out"])  # masked out: passed through

    labels = {"hidden": {"w": "lo", "b": "lo"}, "out": {"w": "sgd", "b": "sgd"}}
    multi = optax.multi_transform({"lo": as_optax(lo, num_steps=10), "sgd": optax.sgd(0.1)}, labels)
    updates, _ = multi.update(grads, multi.init(params), params)
    assert eqx.tree_equal(updates["hidden"], expected["hidden"])
    assert eqx.tree_equal(updates["out"], jax.tree.map(lambda g: -0.1 * g, grads["out"]))


@pytest.mark.slow
def test_equinox_frozen_layer():
    """equinox's "freezing parameters" pattern: `eqx.partition` by a filter spec and
    `eqx.filter_value_and_grad`, which gives `None` gradients for the frozen first layer."""
    x = jax.random.normal(jax.random.key(1), (128, 8))
    y = jnp.sin(x @ jax.random.normal(jax.random.key(2), (8, 1)))
    model = eqx.nn.MLP(8, 1, 16, 2, activation=jnp.tanh, key=jax.random.key(3))
    first = lambda m: (m.layers[0].weight, m.layers[0].bias)
    filter_spec = jax.tree.map(eqx.is_inexact_array, model)
    filter_spec = eqx.tree_at(first, filter_spec, replace=(False, False))
    arrays, static = eqx.partition(model, eqx.is_array)
    num_steps = 30
    opt = as_optax(hand_designed(SmallFC), num_steps=num_steps)

    def loss_fn(diff, rest):
        model = eqx.combine(diff, rest)
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    def train(params_of):
        def step(carry, _):
            arrays, opt_state = carry
            model = eqx.combine(arrays, static)
            diff, rest = eqx.partition(model, filter_spec)
            loss, grads = eqx.filter_value_and_grad(loss_fn)(diff, rest)
            updates, opt_state = opt.update(grads, opt_state, params_of(model))
            model = eqx.apply_updates(model, updates)
            return (eqx.filter(model, eqx.is_array), opt_state), loss

        run = jax.jit(lambda c: jax.lax.scan(step, c, length=num_steps), compiler_options=FAST)
        (arrays_out, opt_state), losses = run((arrays, opt.init(params_of(model))))
        return eqx.combine(arrays_out, static), opt_state, np.asarray(losses)

    # Optimizer state for every parameter (frozen ones included), or for the trainable ones only.
    every, every_state, losses = train(lambda m: eqx.filter(m, eqx.is_inexact_array))
    trainable, trainable_state, _ = train(lambda m: eqx.filter(m, filter_spec))

    assert np.all(np.isfinite(losses)) and losses[-1] < 0.7 * losses[0], losses
    for trained in (every, trainable):
        assert eqx.tree_equal(first(trained), first(model))
        for layer, initial in zip(trained.layers[1:], model.layers[1:]):
            assert not np.array_equal(layer.weight, initial.weight)
            assert not np.array_equal(layer.bias, initial.bias)
    assert eqx.tree_equal(every, trainable, rtol=1e-5, atol=1e-7)
    assert not np.any(every_state.mom.layers[0].weight)  # never touched
    assert trainable_state.mom.layers[0].weight is None  # never created
    assert int(trainable_state.iteration) == num_steps


@pytest.mark.slow
def test_clear_errors_for_missing_parameters():
    params, loss = mlp_problem()
    opt = as_optax(SmallFC(key=jax.random.key(0)), num_steps=10)
    grads = jax.grad(loss)(params)
    some = {"hidden": params["hidden"], "out": {"w": None, "b": params["out"]["b"]}}
    with pytest.raises(ValueError, match=r"no state for it.*\['out'\]\['w'\]"):
        opt.update(grads, opt.init(some), params)
    with pytest.raises(ValueError, match=r"params\['out'\]\['w'\] is None"):
        opt.update(grads, opt.init(params), some)
    with pytest.raises(ValueError, match="does not match the gradients"):
        opt.update({**grads, "out": None}, opt.init(params), {"hidden": params["hidden"]})
    # An equinox model holds non-array leaves (its activation functions).
    with pytest.raises(TypeError, match=r"eqx.filter\(model, eqx.is_inexact_array\)"):
        inspect.unwrap(opt.init)(eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0)))


# ------------------------------------------------------------------------------------------------
# Updates past `num_steps`: `after_end`.

END = 20


def _past_end_problem():
    """A Celo2 with the deployed warm-up + cosine step (the reference `elo_celo2.py` config's,
    which decays to exactly 0 at `num_steps`) on a small problem; the state after a few updates,
    and a function setting its step counter."""
    lo = Celo2(key=jax.random.key(2), init_lr=0.0, end_lr=0.0, warmup_fraction=0.05)
    params = {"w": jax.random.normal(jax.random.key(0), (16, 8)), "b": jnp.zeros(8)}
    grads = jax.tree.map(lambda x: 0.1 * jax.random.normal(jax.random.key(1), x.shape), params)
    state = as_optax(lo, num_steps=END).init(params)
    for _ in range(3):
        _, state = as_optax(lo, num_steps=END).update(grads, state, params)
    at = lambda t: eqx.tree_at(lambda s: s.iteration, state, jnp.int32(t))  # noqa: E731
    return lo, params, grads, at


def _updates_from(opt, steps, grads, at, params):
    """The updates at `steps` (compiled once, the counter traced), each from the state `at(t)`,
    and how many times the update was traced."""
    traces = []

    def update(g, s, p):
        traces.append(None)
        return opt.update(g, s, p)

    update = jax.jit(update)
    out = [update(grads, at(t), params) for t in steps]
    jax.effects_barrier()  # the host callbacks have run
    return out, len(traces)


def _is_zero(tree):
    return all(not np.any(np.asarray(x)) for x in jax.tree.leaves(tree))


@pytest.mark.slow
def test_past_num_steps_the_default_warns_once_and_stops():
    lo, params, grads, at = _past_end_problem()
    assert float(lo.learning_rate(END - 1, END)) == 0.0  # the schedule's last step is 0
    opt = as_optax(lo, num_steps=END)
    with pytest.warns(UserWarning) as record:
        out, traces = _updates_from(opt, range(END - 2, END + 5), grads, at, params)
    assert traces == 1
    assert len(record) == 1
    message = str(record[0].message)
    assert "\n" not in message
    assert "num_steps=20): an update past num_steps" in message
    assert "decayed to 0, so the parameters no longer move" in message
    assert "after_end='hold', 'stop' or 'error'" in message
    assert not _is_zero(out[0][0])
    for updates, new_state in out[2:]:
        assert _is_zero(updates)
    assert [int(s.iteration) for _, s in out] == list(range(END - 1, END + 6))
    # Called eagerly, once per transformation too.
    opt = as_optax(lo, num_steps=END)
    with pytest.warns(UserWarning, match="an update past num_steps") as record:
        for t in range(END - 1, END + 3):
            opt.update(grads, at(t), params)
    assert len(record) == 1


@pytest.mark.slow
def test_past_num_steps_stop_repeats_the_last_scheduled_update_silently():
    lo, params, grads, at = _past_end_problem()
    opt = as_optax(lo, num_steps=END, after_end="stop")
    out, traces = _updates_from(opt, range(END - 1, END + 5), grads, at, params)  # no warning
    assert traces == 1
    for updates, _ in out:
        assert _is_zero(updates)
    for t in range(END, END + 5):
        opt.update(grads, at(t), params)  # eagerly, no warning either


def test_past_num_steps_hold_keeps_the_last_nonzero_step():
    lo, params, grads, at = _past_end_problem()
    assert float(lo.learning_rate(END - 2, END)) > 0.0
    opt = as_optax(lo, num_steps=END, after_end="hold")
    out, traces = _updates_from(opt, range(END - 1, END + 5), grads, at, params)
    assert traces == 1
    assert _is_zero(out[0][0])  # inside the schedule nothing changes: step END - 1 is 0
    stop = jax.jit(as_optax(lo, num_steps=END, after_end="stop").update)
    for t, (updates, new_state) in zip(range(END, END + 5), out[1:]):
        # Each update past the end is that of step END - 2, from the same statistics (up to
        # float32 reassociation: two compiled programs).
        held, _ = stop(grads, eqx.tree_at(lambda s: s.iteration, at(t), jnp.int32(END - 2)), params)
        assert not _is_zero(updates)
        assert eqx.tree_equal(updates, held, rtol=1e-5, atol=1e-12)
        assert int(new_state.iteration) == t + 1
    # The docstring's figure: after a cosine decay to 0 the last nonzero step is tiny.
    ratio = float(lo.learning_rate(998, 1000)) / lo.peak_lr
    assert 2e-6 < ratio < 4e-6


def test_past_num_steps_error_raises():
    lo, params, grads, at = _past_end_problem()
    opt = as_optax(lo, num_steps=END, after_end="error")
    opt.update(grads, at(END - 1), params)
    with pytest.raises(ValueError, match=r"num_steps=20\): an update past num_steps") as info:
        opt.update(grads, at(END), params)
    assert "\n" not in str(info.value)
    update = eqx.filter_jit(opt.update)
    update(grads, at(END - 1), params)
    for t in (END, END + 4):
        with pytest.raises(eqx.EquinoxRuntimeError, match="an update past num_steps"):
            jax.block_until_ready(update(grads, at(t), params))
    # Under `jax.jit`, JAX's runtime error carries the message.
    with pytest.raises(Exception, match="an update past num_steps"):
        jax.block_until_ready(jax.jit(opt.update)(grads, at(END), params))


def test_past_num_steps_the_host_is_called_back_only_past_the_end(monkeypatch):
    """`"warn"` adds no host callback to the scheduled steps, also under `jax.vmap`."""
    import elo.optimizers._optax as module

    calls = []
    original = module._warn_past_end
    monkeypatch.setattr(
        module,
        "_warn_past_end",
        lambda report, count: (calls.append(count), original(report, count)),
    )
    lo, params, grads, at = _past_end_problem()
    opt = as_optax(lo, num_steps=END)

    def steps(first, num):
        def body(state, _):
            _, state = opt.update(grads, state, params)
            return state, None

        return jax.lax.scan(body, at(first), length=num)[0]

    run = jax.jit(steps, static_argnums=1)
    batched = jax.jit(jax.vmap(steps, in_axes=(0, None)), static_argnums=1)
    jax.block_until_ready(run(0, END))
    jax.block_until_ready(batched(jnp.array([0, 3]), END - 3))
    jax.effects_barrier()
    assert calls == []
    with pytest.warns(UserWarning, match="an update past num_steps"):
        jax.block_until_ready(batched(jnp.array([0, 3]), END - 2))
        jax.effects_barrier()
    assert len(calls) >= 1


def test_after_end_must_be_a_known_mode():
    # Without runtime type checking (see test_num_steps_of_another_type).
    unchecked = inspect.unwrap(as_optax)
    with pytest.raises(ValueError, match=r"after_end=.*'warn', 'hold', 'stop', 'error'.*'clamp'"):
        unchecked(SmallFC(key=jax.random.key(0)), num_steps=10, after_end="clamp")
