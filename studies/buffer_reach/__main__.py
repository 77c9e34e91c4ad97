"""The buffer-reach study's driver: `python -m studies.buffer_reach <command> [arguments]`."""

from studies.harness.driver import Command, run


COMMANDS = {"run": Command("studies.buffer_reach.study", "measure and write the results")}

if __name__ == "__main__":
    raise SystemExit(run("buffer_reach", COMMANDS))
