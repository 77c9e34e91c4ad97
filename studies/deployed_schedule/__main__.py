"""The deployed-schedule study's driver:
`python -m studies.deployed_schedule <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {
    "warm-start": Command("studies.deployed_schedule.warm_start", "choose the warm start (§2)"),
    "pilot": Command("studies.deployed_schedule.pilot", "run or resume the pilot; decide", True),
    "train": Command("studies.deployed_schedule.main_runs", "run or resume the main runs (§5)"),
    "headline": Command(
        "studies.deployed_schedule.headline", "tune the checkpoints on the headline cells (§4)"
    ),
    "fresh": Command("studies.deployed_schedule.fresh", "tune the checkpoints on the fresh cells"),
    "fresh-report": Command(
        "studies.deployed_schedule.fresh_report", "H1, H2 and Q3 on the fresh cells (§3)"
    ),
    "ship-rule": Command(
        "studies.deployed_schedule.ship_rule", "ship rule v2 over old and new checkpoints (§4)"
    ),
    "ship": Command(
        "studies.deployed_schedule.ship", "write a new winner's celo2 files, or say none won (§4)"
    ),
    "step0-check": Command(
        "studies.deployed_schedule.step0_check", "the warm start's step-0 check here, on N devices"
    ),
    "report": Command("studies.deployed_schedule.report", "write results/summary.{json,md}"),
    "status": Command("studies.deployed_schedule.pilot", "where every run stands", True),
}

if __name__ == "__main__":
    raise SystemExit(run("deployed_schedule", COMMANDS))
