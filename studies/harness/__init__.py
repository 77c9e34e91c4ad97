"""What every study shares, written once: run summaries, provenance, JSON results, statistics,
tables and cached cells (studies/README.md)."""
