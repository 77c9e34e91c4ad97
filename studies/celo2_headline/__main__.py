"""The headline study's driver: `python -m studies.celo2_headline <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {
    "pilot": Command("studies.celo2_headline.study", "meta-train the pilot runs", True),
    "train": Command("studies.celo2_headline.study", "meta-train the main runs", True),
    "status": Command("studies.celo2_headline.study", "where every run stands", True),
    "evaluate": Command(
        "studies.celo2_headline.evaluate",
        "tune and evaluate on the held-out cells (baselines|runs|horizon|shipped|decayed|added)",
    ),
    "report": Command("studies.celo2_headline.report", "judge and write results/summary.*"),
    "figures": Command("studies.celo2_headline.figures", "draw results/figures/"),
    "run-stats": Command("studies.celo2_headline.run_stats", "how the runs trained"),
    "ship": Command("studies.celo2_headline.ship", "write the shipped optimizer (rule v1)"),
}

if __name__ == "__main__":
    raise SystemExit(run("celo2_headline", COMMANDS))
