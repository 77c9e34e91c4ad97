"""`elo`: meta-train learned optimizers with ELO (Efficient Long-hOrizon learning)."""

from . import (
    distributed as distributed,
    internal as internal,
    optimizers as optimizers,
    presets as presets,
    tasks as tasks,
)
from ._config import MetaConfig as MetaConfig
from ._evaluation._baselines import (
    BASELINES as BASELINES,
    TUNED_BASELINES as TUNED_BASELINES,
    warmup_cosine as warmup_cosine,
)
from ._evaluation._evaluate import (
    evaluate as evaluate,
    Evaluation as Evaluation,
    log_grid as log_grid,
)
from ._evaluation._meta_validation import (
    validate as validate,
    Validation as Validation,
)
from ._evaluation._tuning import (
    AbstractTuningCache as AbstractTuningCache,
    compare as compare,
    Comparison as Comparison,
    lr_sweep as lr_sweep,
    steps_to_target as steps_to_target,
    SWEEP_RANGES as SWEEP_RANGES,
    tune as tune,
    tune_many as tune_many,
    Tuned as Tuned,
)
from ._files._checkpoint import load as load, save as save
from ._files._framing import CheckpointError as CheckpointError
from ._files._optimizer_file import (
    load_optimizer as load_optimizer,
    save_optimizer as save_optimizer,
)
from ._files._pretrained import (
    available_pretrained as available_pretrained,
    pretrained as pretrained,
)
from ._files._pylo import (
    export_pylo as export_pylo,
    import_pylo as import_pylo,
    pylo_state_dict as pylo_state_dict,
)
from ._files._run_dir import (
    read_metrics as read_metrics,
    read_sessions as read_sessions,
    read_validation as read_validation,
    RunDirError as RunDirError,
)
from ._files._tuning_cache import TuningCache as TuningCache
from ._inner._buffer import (
    buffer_pop as buffer_pop,
    buffer_push as buffer_push,
    resume_decision as resume_decision,
    ResumeBuffer as ResumeBuffer,
    should_push as should_push,
)
from ._inner._difficulty import (
    difficulty_scores as difficulty_scores,
    difficulty_step as difficulty_step,
)
from ._inner._fusion import (
    fused_step as fused_step,
    FusedStep as FusedStep,
    imitation_losses as imitation_losses,
)
from ._inner._horizon import (
    AbstractHorizon as AbstractHorizon,
    CurriculumHorizon as CurriculumHorizon,
    LogUniformHorizon as LogUniformHorizon,
    UniformHorizon as UniformHorizon,
)
from ._inner._schedules import (
    ramp as ramp,
    SupervisionSchedule as SupervisionSchedule,
    SupervisionWeights as SupervisionWeights,
)
from ._outer._meta_step import meta_step as meta_step
from ._outer._pes import (
    pes_combine as pes_combine,
    sample_perturbation as sample_perturbation,
)
from ._outer._state import init as init, MetaState as MetaState, Metrics as Metrics
from ._run._environment import environment as environment
from ._run._meta_train import meta_train as meta_train
from ._run._validator import ValidationSettings as ValidationSettings
from ._runtime._cpu import available_cores as available_cores, use_cpu_cores as use_cpu_cores
from ._version import __version__ as __version__
from .optimizers._base import AbstractLearnedOptimizer as AbstractLearnedOptimizer
from .optimizers._celo2 import Celo2 as Celo2
from .optimizers._optax import as_optax as as_optax
from .optimizers._small_fc import SmallFC as SmallFC
