"""The interface every inner problem implements."""

import abc

import equinox as eqx

from .._custom_types import Params, PRNGKeyArray, PyTree, Scalar


class AbstractTask(eqx.Module):
    """An inner problem: a parameterised loss that a learned optimizer is meta-trained on.

    A task is immutable. Its data (if any) are array leaves held on the device, and it draws its
    own minibatches from keys inside the traced graph, so a whole inner training run can live in
    one `jax.lax.scan`. Training loops draw the minibatches of many steps at once, before their
    loop (on CPU this is cheaper than drawing one per step inside it), so a training step is
    split in two: `sample_batch(key)`, the random draw, and `batch_loss(params, batch)`.

    A concrete task defines:

    - `name`: a field or property, the task's display name (e.g. `"mlp-w32-d1_mnist-8x8x1"`).
    - `init(key) -> params`: a fresh draw of the optimizee parameters.
    - `sample_batch(key) -> batch`: the random input of one training step (a minibatch; a task
      whose randomness is not data may return `key` itself).
    - `batch_loss(params, batch) -> scalar`: the training loss on that input.
    - `eval_loss(params, key) -> scalar`: the loss on held-out data (for evaluation).
    - `normalize_loss(loss) -> scalar`: the bounded, finite transform of a training loss used as
      the meta-objective (NaN and infinities map to the upper bound).

    `loss(params, key)` is `batch_loss(params, sample_batch(key))`.
    """

    name: eqx.AbstractVar[str]

    @abc.abstractmethod
    def init(self, key: PRNGKeyArray) -> Params:
        """Draw fresh optimizee parameters.

        **Arguments:**

        - `key`: a JAX PRNG key.

        **Returns:**

        A pytree of float arrays.
        """

    @abc.abstractmethod
    def sample_batch(self, key: PRNGKeyArray) -> PyTree:
        """The random input of one training step, drawn from `key` (see `batch_loss`).

        **Arguments:**

        - `key`: selects the minibatch.

        **Returns:**

        A pytree of arrays (or `key` itself).
        """

    @abc.abstractmethod
    def batch_loss(self, params: Params, batch: PyTree) -> Scalar:
        """Training loss on a batch from `sample_batch`.

        **Arguments:**

        - `params`: the optimizee parameters, structured as returned by `init`.
        - `batch`: a value returned by `sample_batch`.

        **Returns:**

        A float32 scalar.
        """

    def loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Training loss on a minibatch drawn (in-graph) from `key`:
        `batch_loss(params, sample_batch(key))`.

        **Arguments:**

        - `params`: the optimizee parameters, structured as returned by `init`.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """
        return self.batch_loss(params, self.sample_batch(key))

    @abc.abstractmethod
    def eval_loss(self, params: Params, key: PRNGKeyArray) -> Scalar:
        """Loss on a held-out minibatch (the validation or test split) drawn from `key`.

        **Arguments:**

        - `params`: the optimizee parameters.
        - `key`: selects the minibatch.

        **Returns:**

        A float32 scalar.
        """

    @abc.abstractmethod
    def normalize_loss(self, loss: Scalar) -> Scalar:
        """Map a training loss to the bounded, finite value used in the meta-objective.

        **Arguments:**

        - `loss`: a value returned by `loss`.

        **Returns:**

        A finite float32 scalar.
        """
