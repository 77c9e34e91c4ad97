"""The `ablation_small_fc` study (see its README.md)."""
