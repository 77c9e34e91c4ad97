"""The warm start's step-0 check (`rule.md` §1) measured in this environment, on N JAX CPU
devices: what the pilot's runs measure before their first outer step (rule.md, amendment of
2026-12-02).

    python -m studies.deployed_schedule step0-check --devices 2
    python -m studies.deployed_schedule step0-check --devices 1 --checkpoint RUN_DIR

The learned optimizer is what `elo.meta_train` starts a pilot run from: the warm start's
weights with the run's settings (`init_weights_only`), held on every device as the run holds
it. With `--checkpoint`, a run directory's last checkpoint is
measured instead (how the environment moves a trained optimizer's check). One result per
measurement: `results/step0_checks/<what>_<cpu>_<N>dev.json`, with the environment.
"""

import argparse
import re
import time
from pathlib import Path
from typing import Any

from studies import common


HERE = Path(__file__).parent
RESULTS = HERE / "results" / "step0_checks"


def measure(devices: int, checkpoint: Path | None) -> dict[str, Any]:
    """The check's score and per-task scores on `devices` JAX CPU devices."""
    import elo

    got = elo.use_cpu_cores(devices)  # before anything starts JAX
    if got != devices:
        raise SystemExit(f"asked for {devices} JAX CPU devices, got {got}: fewer cores here?")
    import equinox as eqx
    import jax

    from studies.deployed_schedule import pilot, settings, warm_start

    config = settings.config("pes_celo2", settings.PILOT_LEARNING_RATES[0], settings.PILOT_STEPS)
    # Where a run holds its learned optimizer (every device, replicated).
    state = elo.init(config, key=jax.random.key(settings.PILOT_SEED))
    placement = jax.tree.leaves(state.learned_optimizer)[0].sharding
    if checkpoint is None:
        # The warm start's weights with the run's settings, as `init_weights_only` takes them.
        source = warm_start.load(HERE / "results")["path"]
        lo = elo.load_optimizer(source).with_hyperparameters(**settings.OPTIMIZER_SETTINGS)
    else:
        lo = elo.load_optimizer(checkpoint)
    arrays, static = eqx.partition(lo, eqx.is_array)
    lo = eqx.combine(jax.device_put(arrays, placement), static)
    validation = pilot.validation_settings(settings.PILOT_CHECK_EVERY)
    started = time.perf_counter()
    per_task = [
        elo.validate(lo, task, num_steps=validation.num_steps, scales=validation.scales).to_dict()[
            "score"
        ]
        for task in validation.tasks
    ]
    return {
        "what": "warm start" if checkpoint is None else str(checkpoint),
        "score": sum(per_task) / len(per_task),
        "per_task": dict(zip(settings.SELECTION_TASKS, per_task, strict=True)),
        "seconds": time.perf_counter() - started,
        "environment": common.environment(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, required=True, help="JAX CPU devices (1, 2)")
    parser.add_argument("--checkpoint", type=Path, help="a run directory instead of the warm start")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = measure(args.devices, args.checkpoint)
    cpu = re.sub(r"[^a-z0-9]+", "-", result["environment"]["cpu_model"].lower()).strip("-")
    what = "warm_start" if args.checkpoint is None else args.checkpoint.name
    path = args.out_dir / f"{what}_{cpu}_{args.devices}dev.json"
    common.write_json(path, result)
    print(f"{result['score']!r} ({path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
