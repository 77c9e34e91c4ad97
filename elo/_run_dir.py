"""The files of a run directory of `elo meta-train`, named in one place."""

RUN_CHECKPOINT = "checkpoint.eqx"
"""The run's checkpoint ([`elo.save`][]), written atomically."""

CONFIG_FILE = "config.json"
"""The preset, seed and full `MetaConfig` of the run."""

METRICS_FILE = "metrics.jsonl"
"""One JSON record per outer step, plus validation records (a `"validation"` key)."""

BEST_OPTIMIZER = "best_optimizer.eqx"
"""The learned optimizer with the best meta-validation score so far (`--validate-every`)."""

LOCK_FILE = ".lock"
"""Held (`flock`) by the process using the directory."""
