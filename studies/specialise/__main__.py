"""The specialise study's driver: `python -m studies.specialise <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {
    "run": Command("studies.specialise.study", "meta-train the specialisations", True),
    "evaluate": Command("studies.specialise.study", "tune and test before and after", True),
    "report": Command("studies.specialise.study", "write results/report.md", True),
}

if __name__ == "__main__":
    raise SystemExit(run("specialise", COMMANDS))
