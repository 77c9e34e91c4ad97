"""The `language_model` study (see its README.md)."""
