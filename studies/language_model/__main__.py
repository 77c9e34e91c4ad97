"""The language-model study's driver: `python -m studies.language_model <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {"timing": Command("studies.language_model.timing", "time the optimizers' steps")}

if __name__ == "__main__":
    raise SystemExit(run("language_model", COMMANDS))
