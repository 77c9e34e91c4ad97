"""Every file elo reads or writes: framing, optimizer files, checkpoints, PyLO, run directories."""
