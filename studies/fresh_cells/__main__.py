"""The fresh-cells study's driver: `python -m studies.fresh_cells <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {
    "evaluate": Command("studies.fresh_cells.evaluate", "tune every optimizer on the fresh cells"),
    "ship-rule": Command("studies.fresh_cells.ship_rule", "ship rule v2 on validation data"),
    "ship": Command("studies.fresh_cells.ship", "write ship rule v2's winner as celo2"),
    "eval-points": Command(
        "studies.fresh_cells.eval_points", "what measuring at eleven points cost (an amendment)"
    ),
    "report": Command("studies.fresh_cells.report", "the verdict and every cell's rows"),
    "record": Command("studies.fresh_cells.record", "the shipped Celo2 records' evaluation tables"),
    "status": Command("studies.fresh_cells.status", "the results left, in the order they run"),
}

if __name__ == "__main__":
    raise SystemExit(run("fresh_cells", COMMANDS))
