"""Test-wide JAX settings: strict numerics and four CPU devices so sharding is tested everywhere."""

import os
import shutil
import tempfile


os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
# One compilation cache on disk for the whole run, shared by the test processes a run starts
# (`elo meta-train` in a subprocess, the distributed tests' peers): many tests compile the same
# small meta-training programs. Per run, so no test ever reads a program an older `elo` compiled.
# Made by the first process of a run; the workers pytest-xdist starts inherit its environment.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="elo-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE

import jax  # noqa: E402


jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Not `jax_numpy_dtype_promotion="strict"`: optax's own Adam bias correction computes
# `decay ** count` with an int32 count (optax/tree_utils/_tree_math.py, tree_bias_correction),
# which strict promotion rejects, and the experts, the meta-optimizer and the baselines are optax.


import pytest  # noqa: E402


_MAPPINGS_BEFORE_RELEASE = 40_000


def _memory_mappings() -> int:
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module once the process holds many memory
    mappings. The whole lane runs in one process and compiles thousands of programs; each holds
    mappings of its machine code, and past the kernel's limit (`vm.max_map_count`, 65530 here)
    XLA's compiler crashes. Clearing only near that limit keeps the programs that later modules
    compile again (the small meta-training configurations above all)."""
    yield
    if _memory_mappings() > _MAPPINGS_BEFORE_RELEASE:
        jax.clear_caches()


@pytest.hookimpl(optionalhook=True)  # optional: `-p no:xdist` runs without the plugin
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's `addopts`) starts, for the fast lane, one worker more than there
    are cores, capped by `--maxprocesses`: a worker waiting on a subprocess or a sleep leaves its
    core to the extra one. Measured on 2 cores (clean clone, 509 tests): 2 workers 5:11 and
    5:13, 3 workers 4:39, 4:04 and 4:37, 4 workers 4:59. Other lanes (an `-m` of their own: the
    slow lane's tests are larger) and `PYTEST_XDIST_AUTO_NUM_WORKERS` get xdist's own count (one
    worker per core)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.getoption("markexpr") != (
        "not slow"
    ):
        return None
    from elo._runtime._cpu import available_cores  # a cgroup CPU quota counts

    return available_cores() + 1


def pytest_unconfigure(config):
    """The run's compilation cache goes with the run, removed by the process that made it."""
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
