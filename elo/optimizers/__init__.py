"""Learned optimizers (small_fc, Celo2), the AdamW/Muon experts of ELO, and optax interop."""

from ._accumulators import LOState as LOState
from ._base import AbstractLearnedOptimizer as AbstractLearnedOptimizer
from ._celo2 import Celo2 as Celo2
from ._experts import (
    adamw_expert as adamw_expert,
    expert_from_config as expert_from_config,
    expert_lr_schedule as expert_lr_schedule,
    muon_expert as muon_expert,
)
from ._newton_schulz import newton_schulz as newton_schulz
from ._newton_schulz_mesh import newton_schulz_many as newton_schulz_many
from ._optax import as_optax as as_optax
from ._registry import LEARNED_OPTIMIZERS as LEARNED_OPTIMIZERS
from ._small_fc import SmallFC as SmallFC
