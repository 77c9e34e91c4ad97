"""The learned optimizer alone: evaluation, tuned baselines, meta-validation."""
