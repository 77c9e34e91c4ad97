"""Every fixed choice of the deployed-schedule study (`rule.md`), as data the code reads.

Changing a value here after runs exist makes the driver refuse to continue in the same results
directory (the settings are recorded with the first run).
"""

from typing import Any

import elo
from studies.celo2_headline import settings as headline
from studies.fresh_cells import settings as fresh_cells


# rule.md §1: the learned optimizer's settings in every run (the reference `elo_celo2.py`
# config's warm-up + cosine step, weight decay 0.1, AdamW path at the same rate).
OPTIMIZER_SETTINGS = dict(elo.presets.CELO2_REFERENCE_SETTINGS)
# ELO's supervision schedule, as fractions of the budget: imitation for 10%, the learned
# optimizer alone from 40%, no floor (the headline pilot's choice, `cpu_10_40`, which
# `headline.preset_overrides` sets).
ELO_SUPERVISION = headline.PILOT_SCHEDULES[headline.DEFAULT_SCHEDULE]
METHODS = {"pes_celo2": "PES-Celo2", "elo_celo2": "ELO-Celo2 (Muon expert)"}

# rule.md §1: the checks. The headline's selection tasks, 5,000 steps with the deployed
# schedule, at parameter scale 1 only, 2 seeds (`elo.validate`'s default).
SELECTION_TASKS = headline.SELECTION_TASKS
VALIDATE_STEPS = 5000
VALIDATE_SCALES = (1.0,)
CHECKPOINT_EVERY = 250

# rule.md §2: the warm start's candidates, in the order that breaks a tie: ship rule v2's
# candidates that are headline main runs (`<arm>/s<seed>`), in its order.
WARM_START_CANDIDATES = tuple(c for c in fresh_cells.SHIP_CANDIDATES if "/" in c)

# rule.md §3-4: the pilot.
PILOT_SEED = 200
PILOT_STEPS = 3000
PILOT_CHECK_EVERY = 1000
# A pilot run's score: the mean of its checks at these outer steps.
PILOT_SCORE_STEPS = (2000, 3000)
PILOT_LEARNING_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2)
RESUME_PROBABILITIES = (0.1, 0.5, 0.8)
# The step-0 checks of the pilot's runs (same weights, same tasks) must agree to this.
STEP0_RTOL = 1e-6
# Across environments (CPU model, device count) they differ by the rounding the check's 5,000
# training steps carry: 1.2e-3 measured (rule.md, amendment of 2026-12-02). A run that did not
# start from the warm start differs by far more (the headline's random start scores ~2.4).
STEP0_ACROSS_ENVIRONMENTS_RTOL = 1e-2

# rule.md §5: what the main runs will be (their own rule file fixes the rest).
MAIN_STEPS = 10_000
MAIN_CHECK_EVERY = 2000
MAIN_SEEDS = (0, 1, 2)

# What main_rule.md is to register (§2): the held-out evaluation. The fresh cells without cell
# 13, which costs one Celo2 checkpoint about 3.2 hours of the 2-core VM, more than the other 13
# together.
FRESH_CELLS_LEFT_OUT = (("mlp-w256-d4_cifar10-8x8x3", 20000),)
# The headline's constant-step PES-Celo2 seeds evaluated beside this study's (Q3); its seed 0 is
# the shipped `celo2`, whose fresh results exist.
FRESH_HEADLINE_PES_SEEDS = (1, 2)
# main_rule.md §2: the `celo2` shipped when the rule was written (the headline's PES-Celo2 s0),
# whose fresh-cell results are the constant-step arm's seed 0 and a mark to beat. Pinned, so
# that a later ship (§4) cannot change what they are.
MARKS_CELO2_SHA256 = "e245524aed1ece50acddbddc857684ec0db08173c8d73b925bb76705ccdda35d"
# What main_rule.md is to register (§3), H2: the long cells are those of this many steps or
# more (cells 10, 11, 12, 14).
H2_MIN_HORIZON = 5000


def config(
    method: str, learning_rate: float, steps: int, resume_probability: float | None = None
) -> elo.MetaConfig:
    """The `MetaConfig` of one run of this study: `method` (`pes_celo2`, `elo_celo2`) at the
    paper's width with the deployed optimizer settings, meta learning rate `learning_rate`
    (cosine to a tenth of it over `steps` outer steps) and, for ELO, its resume probability."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: one of {', '.join(METHODS)}.")
    if method == "pes_celo2" and resume_probability is not None:
        raise ValueError("PES-Celo2 has no resume buffer: resume_probability is ELO's.")
    if method == "elo_celo2" and resume_probability is None:
        raise ValueError("ELO-Celo2's runs name their resume probability (rule.md §4).")
    # The headline's fields (budget, meta learning rate, ELO's supervision schedule), then
    # this study's: the deployed optimizer settings and ELO's resume probability.
    fields = headline.preset_overrides(method, learning_rate, headline.DEFAULT_SCHEDULE, steps)
    fields["optimizer_settings"] = OPTIMIZER_SETTINGS
    if method == "pes_celo2":
        return elo.presets.pes_celo2(**fields)
    fields["resume_probability"] = resume_probability
    return elo.presets.elo_celo2_deployed(**fields)


def recorded() -> dict[str, Any]:
    """The settings that shape this study's runs, as recorded with its results: a results
    directory is continued only with these unchanged."""
    return {
        "optimizer_settings": OPTIMIZER_SETTINGS,
        "elo_supervision": list(ELO_SUPERVISION),
        "selection_tasks": list(SELECTION_TASKS),
        "validate_steps": VALIDATE_STEPS,
        "validate_scales": list(VALIDATE_SCALES),
        "checkpoint_every": CHECKPOINT_EVERY,
        "warm_start_candidates": list(WARM_START_CANDIDATES),
        "pilot": {
            "seed": PILOT_SEED,
            "steps": PILOT_STEPS,
            "check_every": PILOT_CHECK_EVERY,
            "score_steps": list(PILOT_SCORE_STEPS),
            "learning_rates": list(PILOT_LEARNING_RATES),
            "resume_probabilities": list(RESUME_PROBABILITIES),
        },
    }
