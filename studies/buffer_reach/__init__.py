"""The `buffer_reach` study (see its README.md)."""
