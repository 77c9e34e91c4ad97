"""The `celo2_headline` study (see its README.md)."""
