"""The `tutorial` study (see its README.md)."""
