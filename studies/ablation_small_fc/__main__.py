"""The small_fc ablation's driver: `python -m studies.ablation_small_fc <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {
    "run": Command(
        "studies.ablation_small_fc.study",
        "run or continue the runs (--report: judge and write results/summary.*)",
    ),
    "budget": Command("studies.ablation_small_fc.budget", "the 10,000-step budget check"),
    "ship": Command("studies.ablation_small_fc.ship_pretrained", "write small_fc_mnist8"),
}

if __name__ == "__main__":
    raise SystemExit(run("ablation_small_fc", COMMANDS))
