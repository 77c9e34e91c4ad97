"""The learned-optimizer registry: `MetaConfig.optimizer` and file headers name classes by it."""

from collections.abc import Callable

from ._base import AbstractLearnedOptimizer
from ._celo2 import Celo2
from ._small_fc import SmallFC


LEARNED_OPTIMIZERS: dict[str, Callable[..., AbstractLearnedOptimizer]] = {
    "small_fc": SmallFC,
    "celo2": Celo2,
}
"""`MetaConfig.optimizer` → learned-optimizer class."""
