"""The fresh-cells study's settings as data (`rule.md` is the rule; this is what code reads).

Nothing here was evaluated before the rule was committed: the cells are (task, horizon) pairs
that no study of this repository has run an optimizer on.
"""

from studies.fresh_cells import tasks


# (task, horizon), in the order they are evaluated: cheap cells of every kind first, so that a
# partial evaluation covers every kind (rule.md, "Order").
CELLS = (
    ("conv-c8-d1_mnist-8x8x1", 300),
    (tasks.FRIEDMAN, 300),
    ("transformer-w16-d3-h2_shakespeare-ctx64", 300),
    ("mlp-w256-d2_mnist-8x8x1", 2000),
    (tasks.FRIEDMAN, 3000),
    (tasks.autoencoder_name("mnist", (32, 8)), 3000),
    ("mlp-w128-d1_cifar10-8x8x3", 1000),
    ("conv-c32-d3_fashionmnist-8x8x1", 2000),
    ("transformer-w64-d2-h4_shakespeare-ctx16", 1000),
    (tasks.ADDING, 5000),
    ("mlp-w64-d5_fashionmnist-8x8x1", 5000),
    ("conv-c32-d1_cifar10-8x8x3", 5000),
    ("mlp-w256-d4_cifar10-8x8x3", 20000),
    (tasks.autoencoder_name("fashionmnist", (64, 16)), 20000),
)
KINDS = {
    "mlp": ("mlp-w256-d2", "mlp-w128-d1", "mlp-w64-d5", "mlp-w256-d4"),
    "conv": ("conv-c8-d1", "conv-c32-d3", "conv-c32-d1"),
    "transformer": ("transformer-w16-d3-h2", "transformer-w64-d2-h4"),
    "recurrent": ("lstm-h32",),
    "regression": ("regression-mlp-w32-d2",),
    "autoencoder": ("autoencoder-mlp-32-8", "autoencoder-mlp-64-16"),
}
EVAL_SEEDS = 3
SWEEP_POINTS = 7
# Peak rates (baselines) and `learning_rate` multipliers (learned optimizers), log-spaced,
# three decades each.
GRIDS = {
    "adamw": (1e-4, 1e-1),
    "muon": (1e-3, 1.0),
    "sgd": (1e-3, 1.0),
    "learned": (1e-2, 10.0),
}
# A choice at an end of its grid adds the next log-spaced value past that end, up to this many
# times; a choice still at the end is reported as such.
MAX_EDGE_EXTENSIONS = 3
# Every optimizer: linear warm-up over 5% of the run, cosine decay to 0 at its last step.
WARMUP_FRACTION = 0.05
LEARNED_SCHEDULES = {
    "Celo2": {"init_lr": 0.0, "end_lr": 0.0, "warmup_fraction": WARMUP_FRACTION},
    "SmallFC": {
        "init_lr": 0.0,
        "warmup_fraction": WARMUP_FRACTION,
        "use_cosine_schedule": True,
        "step_mult_min": 0.0,
    },
}
# Weight decay, one stated value per family, never swept: optax's defaults for the baselines
# (AdamW 1e-4; Muon 0, its Adam branch 0; SGD none) and each learned optimizer's own (0 for all
# three evaluated here).
WEIGHT_DECAY = {"adamw": 1e-4, "muon": 0.0, "sgd": 0.0, "learned": "the optimizer's own"}
BASELINES = ("adamw", "muon", "sgd")
# The learned optimizers evaluated on every fresh cell (`elo.pretrained` names); "celo2" is the
# ship rule's winner (rule.md, "Ship rule v2").
LEARNED = ("celo2", "celo2_published", "small_fc_mnist8")
# The optimizers the verdict reads (rule.md §4).
VERDICT_OPTIMIZERS = ("adamw", "celo2")
# The order of the rest of the evaluation (rule.md, amendments of 2026-11-29): each group runs
# on every cell, in CELLS's order, before the next group; within a group, every optimizer on a
# cell before the next cell. The verdict's optimizers first, then the published Celo2's row
# (§4 reports it beside celo2's), then Muon (the second reference of §4's ratios), then the rest.
EVALUATION_ORDER = (VERDICT_OPTIMIZERS, ("celo2_published",), ("muon",), ("small_fc_mnist8", "sgd"))
# The verdict: the shipped Celo2 at or below tuned AdamW's test loss on at least this share.
VERDICT_SHARE = 2 / 3

# Ship rule v2's candidates: the six Celo2 main runs of the headline study (their selected
# checkpoints' decayed results exist) and the published Celo2.
SHIP_CANDIDATES = (
    "pes_celo2/s0",
    "pes_celo2/s1",
    "pes_celo2/s2",
    "elo_celo2/s0",
    "elo_celo2/s1",
    "elo_celo2/s2",
    "celo2_published",
)
