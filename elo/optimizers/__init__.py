"""Learned optimizers (small_fc, Celo2), the AdamW/Muon experts of ELO, and optax interop."""

from ._accumulators import LOState as LOState
from ._experts import (
    adamw_expert as adamw_expert,
    expert_from_config as expert_from_config,
    expert_lr_schedule as expert_lr_schedule,
    muon_expert as muon_expert,
)
from ._newton_schulz import newton_schulz as newton_schulz
from ._newton_schulz_mesh import newton_schulz_many as newton_schulz_many
