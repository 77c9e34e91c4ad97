"""The main runs (rule.md §5, then `main_rule.md`): PES-Celo2 and ELO-Celo2 from the warm start
at the pilot's meta learning rate (ELO at the pilot's resume probability), `MAIN_STEPS` outer
steps each, paired seeds `MAIN_SEEDS`, checks every `MAIN_CHECK_EVERY` outer steps.

    python -m studies.deployed_schedule train     # run or resume them, seed by seed

They start only once the pilot has decided (`results/pilot_decision.json`) and `main_rule.md`
is committed, unchanged since. A finished run's `meta.json` (its checks, the step of the
checkpoint selected on validation, ELO's supervision phases), `run_summary.json`,
`segments.json` and both optimizers (`best_optimizer.eqx`, selected on validation, and
`final_optimizer.eqx`) go to `results/main/<method>/s<seed>/`.
"""

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.deployed_schedule import pilot, settings, warm_start
from studies.harness.resumable import train_resumable
from studies.harness.runs import RUN_SUMMARY, run_summary, run_totals


HERE = Path(__file__).parent
MAIN_RULE = HERE / "main_rule.md"
DECISION = "pilot_decision.json"


def run_name(method: str, seed: int) -> str:
    """A main run's directory name under the runs and results directories."""
    return f"main/{method}/s{seed}"


def main_runs(decision: dict[str, Any]) -> list[tuple[str, int, elo.MetaConfig]]:
    """Every main run as (name, seed, config), in the order they run: seed by seed, PES then
    ELO, so that each finished seed adds one paired comparison."""
    lr = decision["rate"]["chosen"]
    probability = decision["resume"]["chosen"]
    runs = []
    for seed in settings.MAIN_SEEDS:
        pes = settings.config("pes_celo2", lr, settings.MAIN_STEPS)
        elo_run = settings.config(
            "elo_celo2", lr, settings.MAIN_STEPS, resume_probability=probability
        )
        runs += [
            (run_name("pes_celo2", seed), seed, pes),
            (run_name("elo_celo2", seed), seed, elo_run),
        ]
    return runs


def load_decision(results: Path) -> dict[str, Any]:
    """The pilot's decision; stops the driver while the pilot has not decided."""
    path = results / DECISION
    if not path.is_file():
        raise SystemExit(
            f"{path} does not exist: the pilot has not decided. Run "
            "`python -m studies.deployed_schedule pilot` to its end first (rule.md §5)."
        )
    return common.load_json(path)


def main_rule_commit(rule: Path = MAIN_RULE) -> str:
    """The last commit of `main_rule.md`; stops the driver while the file is missing,
    uncommitted or changed since (the main runs are pre-registered: rule.md §5)."""

    def git(*argv: str) -> str:
        done = subprocess.run(
            ["git", *argv], cwd=rule.parent, capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("log", "-1", "--format=%H", "--", rule.name)
    if not rule.is_file() or not commit or git("status", "--porcelain", "--", rule.name):
        raise SystemExit(
            f"{rule} is not committed as it is: write the main runs' rule and commit it before "
            "the first main run (rule.md, preamble and §5)."
        )
    return commit


def phases(config: elo.MetaConfig, checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """ELO's supervision phases in outer steps, and the checks of the learned optimizer trained
    alone (from the end of the ramp on): the curve issue 44 asks to see beside PES's. None for
    PES, which has no supervision."""
    if config.expert == "none":
        return None
    imitation_until, alone_from = config.supervision_steps()
    return {
        "imitation_until": imitation_until,
        "alone_from": alone_from,
        "alone_checks": [c for c in checks if c["step"] >= alone_from],
    }


def summarise(out: Path, results: Path, config: elo.MetaConfig, start: dict[str, Any]) -> None:
    """A finished run's `run_summary.json`, `meta.json` and optimizers (see the module)."""
    checks = elo.read_validation(out)
    # Ties go to the earlier check, as `elo.meta_train` keeps best_optimizer.eqx.
    best = min(checks, key=lambda r: (r["validation"]["score"], r["step"]))
    scored = pilot.meta_checks(checks)
    results.mkdir(parents=True, exist_ok=True)
    common.write_json(results / RUN_SUMMARY, run_summary(out))
    shutil.copyfile(out / "best_optimizer.eqx", results / "best_optimizer.eqx")
    elo.save_optimizer(results / "final_optimizer.eqx", elo.load_optimizer(out))
    common.write_json(
        results / "meta.json",
        {
            "config": json.loads((out / "config.json").read_text())["config"],
            "warm_start": start["winner"],
            **run_totals(elo.read_metrics(out)),
            "seconds_checks": [float(r["seconds"]) for r in checks],
            "checks": scored,
            "best_validation_step": best["step"],
            "best_validation_score": best["validation"]["score"],
            "phases": phases(config, scored),
        },
    )


def train(name: str, seed: int, config: elo.MetaConfig, args, start: dict[str, Any]) -> bool:
    """Run or resume one main run and summarise it; False when another driver has it."""
    return train_resumable(
        name,
        runs_dir=Path(args.runs_dir),
        results_dir=Path(args.results_dir),
        total_steps=config.num_outer_steps,
        run=lambda out: pilot.meta_train_run(
            config, out, start, seed=seed, check_every=settings.MAIN_CHECK_EVERY
        ),
        summarise=lambda out, results: summarise(out, results, config, start),
        log=pilot.log,
    )


def run_main(args) -> None:
    """Every main run in order, after the two preconditions (the module docstring)."""
    results = Path(args.results_dir)
    decision = load_decision(results)
    rule = main_rule_commit()
    start = warm_start.load(results)
    pilot.log(f"main runs under main_rule.md at {rule[:7]}")
    for name, seed, config in main_runs(decision):
        train(name, seed, config, args, start)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs-dir", default=str(HERE / "runs"), help="run directories")
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    args = parser.parse_args()
    pilot.prepare(Path(args.results_dir))
    run_main(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
