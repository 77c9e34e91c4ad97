"""Pieces of `elo` that are documented but not promised: they may change between releases.

They are here for people who extend the engine (a new supervision mode, a new statistic) or
test it; everyday use needs only the top-level `elo` namespace.
"""

from ._inner._buffer import record_window as record_window
from ._inner._difficulty import (
    difficulty_init as difficulty_init,
    difficulty_reset as difficulty_reset,
    difficulty_update as difficulty_update,
    DifficultyState as DifficultyState,
    FAILURE_LOSS as FAILURE_LOSS,
    sanitize_loss as sanitize_loss,
)
from ._inner._divergence import (
    AbstractDivergenceRule as AbstractDivergenceRule,
    LossBoundRule as LossBoundRule,
    NoDivergenceRule as NoDivergenceRule,
)
from ._inner._inner_problem import (
    InnerProblem as InnerProblem,
    SideStep as SideStep,
    UnrollSettings as UnrollSettings,
)
from ._inner._meta_loss import mix_deltas as mix_deltas, rms_normalize as rms_normalize
from ._inner._particle import (
    Particle as Particle,
    Restart as Restart,
    Side as Side,
    Snapshot as Snapshot,
)
from ._inner._records import StepRecord as StepRecord
from ._inner._restarts import (
    AbstractRestarts as AbstractRestarts,
    BufferedRestarts as BufferedRestarts,
    FreshRestarts as FreshRestarts,
)
from ._inner._supervision import (
    AbstractSupervision as AbstractSupervision,
    AlternatingSupervision as AlternatingSupervision,
    LossDeltas as LossDeltas,
    NoSupervision as NoSupervision,
    ProgressiveSupervision as ProgressiveSupervision,
)
from ._outer._build import (
    build_divergence_rule as build_divergence_rule,
    build_expert as build_expert,
    build_horizon as build_horizon,
    build_learned_optimizer as build_learned_optimizer,
    build_meta_optimizer as build_meta_optimizer,
    build_problems as build_problems,
    build_restarts as build_restarts,
    build_supervision as build_supervision,
    EXPERTS as EXPERTS,
    HORIZONS as HORIZONS,
    initial_loss as initial_loss,
    SUPERVISIONS as SUPERVISIONS,
)
from ._outer._meta_step import meta_gradient as meta_gradient
from ._outer._pes import pes_grad as pes_grad, Unrolled as Unrolled
from ._outer._step_stats import group_metrics as group_metrics, merge_groups as merge_groups
from ._runtime._hlo import hlo_collectives as hlo_collectives

# The registry's name before it moved into `elo.optimizers` (as `LEARNED_OPTIMIZERS`).
from .optimizers import LEARNED_OPTIMIZERS as OPTIMIZERS  # noqa: F401
