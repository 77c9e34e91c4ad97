"""The inner loop and ELO's policies: particles, the resume buffer, horizons, supervision."""
