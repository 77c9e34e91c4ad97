"""The machine: CPU devices, the particle mesh, JAX's distributed runtime."""
