"""The outer loop: building a run from a config, its state, the PES estimate, the meta-step."""
