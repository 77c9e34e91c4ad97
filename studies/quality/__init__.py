"""The `quality` study (see its README.md)."""
