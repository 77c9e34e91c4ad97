"""Record the golden runs with the test suite's JAX settings (four CPU devices, strict ranks)."""

import os
import sys
from pathlib import Path


os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
import jax  # noqa: E402


jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.golden import runs  # noqa: E402


runs.main()
