"""The main runs (rule.md §5, then `main_rule.md`): PES-Celo2 and ELO-Celo2 from the warm start
at the pilot's meta learning rate (ELO at the pilot's resume probability), `MAIN_STEPS` outer
steps each, paired seeds `MAIN_SEEDS`, checks every `MAIN_CHECK_EVERY` outer steps.

    python -m studies.deployed_schedule train     # run or resume them, seed by seed

They start only once the pilot has decided and both files are committed, unchanged since, the
rule after the decision: `results/pilot_decision.json`, then `main_rule.md`. The first start
records the main runs' settings (`results/main/settings.json`: length, checks, seeds, the
pilot's choices, the rule's commit); a later start with other settings is refused (a later
commit of the rule aside: an amendment, dated in the file). A finished run's
`meta.json` (the pilot's, plus the step of the checkpoint selected on validation, ELO's
supervision phases and the rule's commit), `run_summary.json`, `segments.json` and both
optimizers (`best_optimizer.eqx`, selected on validation, and `final_optimizer.eqx`) go to
`results/main/<method>/s<seed>/`.
"""

import argparse
import shutil
import subprocess
from pathlib import Path
from typing import Any

import elo
from studies import common
from studies.deployed_schedule import pilot, settings, warm_start
from studies.harness.resumable import train_resumable
from studies.harness.runs import RUN_SUMMARY, run_summary


HERE = Path(__file__).parent
MAIN_RULE = HERE / "main_rule.md"


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
    path = results / pilot.DECISION
    if not path.is_file():
        raise SystemExit(
            f"{path} does not exist: the pilot has not decided. Run "
            "`python -m studies.deployed_schedule pilot` to its end first (rule.md §5)."
        )
    return common.load_json(path)


def _git(directory: Path, *argv: str) -> tuple[int, str]:
    done = subprocess.run(
        ["git", *argv], cwd=directory, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout.strip()


def committed_as_is(path: Path) -> str:
    """The last commit of `path`, or "" when the file is missing, uncommitted or changed since."""
    code, commit = _git(path.parent, "log", "-1", "--format=%H", "--", path.name)
    _, changes = _git(path.parent, "status", "--porcelain", "--", path.name)
    return commit if path.is_file() and code == 0 and commit and not changes else ""


def main_rule_commit(decision: Path, rule: Path = MAIN_RULE) -> str:
    """The last commit of `main_rule.md`; stops the driver unless the pilot's `decision` file
    and the rule are both committed as they are, and the rule's first commit is the decision's
    commit or after it (the main runs are pre-registered after the pilot: rule.md, preamble and
    §5; a later commit of the rule is a dated amendment)."""
    decided = committed_as_is(decision)
    if not decided:
        raise SystemExit(
            f"{decision} is not committed as it is: commit the pilot's decision, then write "
            "main_rule.md and commit it (rule.md §5)."
        )
    commit = committed_as_is(rule)
    if not commit:
        raise SystemExit(
            f"{rule} is not committed as it is: write the main runs' rule and commit it before "
            "the first main run (rule.md, preamble and §5)."
        )
    _, added = _git(rule.parent, "log", "--diff-filter=A", "--format=%H", "--", rule.name)
    first = added.splitlines()[-1]
    code, _ = _git(rule.parent, "merge-base", "--is-ancestor", decided, first)
    if code == 1:
        raise SystemExit(
            f"{rule} was first committed ({first[:7]}) before the pilot's decision "
            f"({decided[:7]}): the main runs' rule is written after the pilot decides (rule.md "
            "§5); remove it and write it anew in a commit after the decision's."
        )
    if code != 0:
        raise SystemExit(
            f"git cannot tell whether the pilot's decision ({decided[:7]}) precedes {rule}'s "
            f"first commit ({first[:7]}): merge the decision's commit into this branch."
        )
    return commit


def check_main_settings(results: Path, decision: dict[str, Any], rule_commit: str) -> None:
    """Record the main runs' settings with their first start; refuse to continue with others.
    A later amendment of `main_rule.md` (a new commit) is allowed: it is dated in the file."""
    path = results / "main" / "settings.json"
    current = {
        "steps": settings.MAIN_STEPS,
        "check_every": settings.MAIN_CHECK_EVERY,
        "seeds": list(settings.MAIN_SEEDS),
        "meta_learning_rate": decision["rate"]["chosen"],
        "resume_probability": decision["resume"]["chosen"],
    }
    if path.is_file():
        if common.load_json(path)["settings"] != current:
            raise SystemExit(
                f"{path} records other main-run settings than settings.py and the pilot's "
                "decision now: restore them (the main runs continue only as they began)."
            )
        return
    common.write_json(path, {"settings": current, "main_rule_commit": rule_commit})


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


def summarise(
    out: Path, results: Path, config: elo.MetaConfig, start: dict[str, Any], rule_commit: str
) -> None:
    """A finished run's `run_summary.json` and optimizers, then its `meta.json` (the pilot's
    `meta_record` with the checkpoint selected on validation, ELO's phases and the rule's
    commit), written last: a `meta.json` marks the run as summarised (see the module)."""
    results.mkdir(parents=True, exist_ok=True)
    common.write_json(results / RUN_SUMMARY, run_summary(out))
    shutil.copyfile(out / "best_optimizer.eqx", results / "best_optimizer.eqx")
    elo.save_optimizer(results / "final_optimizer.eqx", elo.load_optimizer(out))
    checks = elo.read_validation(out)
    # Ties go to the earlier check, as `elo.meta_train` keeps best_optimizer.eqx.
    best = min(checks, key=lambda r: (r["validation"]["score"], r["step"]))
    meta = pilot.meta_record(out, start)
    meta |= {
        "best_validation_step": best["step"],
        "best_validation_score": best["validation"]["score"],
        "phases": phases(config, meta["checks"]),
        "main_rule_commit": rule_commit,
    }
    common.write_json(results / "meta.json", meta)


def train(
    name: str, seed: int, config: elo.MetaConfig, args, start: dict[str, Any], rule_commit: str
) -> bool:
    """Run or resume one main run and summarise it; False when another driver has it."""
    return train_resumable(
        name,
        runs_dir=Path(args.runs_dir),
        results_dir=Path(args.results_dir),
        total_steps=config.num_outer_steps,
        run=lambda out: pilot.meta_train_run(
            config, out, start, seed=seed, check_every=settings.MAIN_CHECK_EVERY
        ),
        summarise=lambda out, results: summarise(out, results, config, start, rule_commit),
        log=pilot.log,
    )


def main() -> int:
    """Check the preconditions (they start no JAX), then one device per core, then every main
    run in order."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs-dir", default=str(HERE / "runs"), help="run directories")
    parser.add_argument("--results-dir", default=str(HERE / "results"), help="results")
    args = parser.parse_args()
    results = Path(args.results_dir)
    decision = load_decision(results)
    rule_commit = main_rule_commit(results / pilot.DECISION)
    start = warm_start.load(results)
    pilot.prepare(results)
    check_main_settings(results, decision, rule_commit)
    pilot.log(f"main runs under main_rule.md at {rule_commit[:7]}")
    for name, seed, config in main_runs(decision):
        train(name, seed, config, args, start, rule_commit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
