"""A resumable meta-training run in a directory: `elo.meta_train`."""
