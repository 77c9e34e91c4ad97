"""Test-wide JAX settings: strict numerics and four CPU devices so sharding is tested everywhere."""

import os


os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402


jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Not `jax_numpy_dtype_promotion="strict"`: optax's own Adam bias correction computes
# `decay ** count` with an int32 count (optax/tree_utils/_tree_math.py, tree_bias_correction),
# which strict promotion rejects, and the experts, the meta-optimizer and the baselines are optax.


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module. The whole suite runs in one process
    and compiles thousands of programs; each holds memory mappings of its machine code, and past
    the kernel's limit on mappings (`vm.max_map_count`, 65530 here) XLA's compiler crashes."""
    yield
    jax.clear_caches()
