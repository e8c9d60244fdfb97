"""Test configuration: a fixed, derandomized hypothesis profile so runs are repeatable, and XLA's cheaper
LLVM optimization for the suite's many small kernels.

Most of the suite's time is XLA compiling small kernels; the tests check values, not speed, so XLA's
backend (LLVM) optimization is turned down for them (measured: op-table and layer tests 176 -> 155 s).
Set before jax is imported; subprocesses the tests start inherit it.

The tests' own ``jax.jit`` programs (the lowered graphs, ``jax.vjp`` references, check_grads' Hessian-vector
products) and compiled steps also use XLA:CPU's older elemental emitters, as dynajax's eager kernels already
do (``dynajax._device.EAGER_CPU_OPTIONS``), and emit each module in one piece rather than split for parallel
LLVM codegen, which on the suite's two busy cores only adds work (measured on op-table tests, two runs side
by side: backend compile 31.7 -> 16.7 s with the elemental emitters, then 25.3 -> 21.4 s with one split)."""
import os

# the suite is hermetic: on-disk caches only where a test turns one on (some tests count compiles, and a
# developer's cache folder would turn them into loads); subprocesses the tests start inherit this
for _var in ("DYNAJAX_COMPILE_CACHE", "DYNAJAX_KERNEL_CACHE"):
    os.environ.pop(_var, None)

# full float32 matmuls where the default is lower (TF32 on GPUs): the tests compare values at float32 tolerances
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                           " --xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false"
                           " --xla_cpu_parallel_codegen_split_count=1").strip()

from hypothesis import HealthCheck, settings

settings.register_profile("dynajax", derandomize=True, max_examples=25, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dynajax"))


import jax
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "x64: the test runs JAX itself on float64/int64 reference computations, so "
                                       "with JAX's 64-bit types on (as a user of JAX on 64-bit values must: "
                                       "docs/jax.md); the rest of the suite runs in JAX's default 32-bit mode")


@pytest.fixture(autouse=True)
def _jax_x64_for_marked_tests(request):
    if request.node.get_closest_marker("x64") is None:
        yield
        return
    with jax.enable_x64(True):
        yield


# Each live XLA:CPU executable holds memory mappings of its code, and a process may hold at most
# vm.max_map_count of them (65530): the suite compiles tens of thousands of small kernels, and past that
# limit XLA crashed compiling the next one (SIGSEGV/SIGABRT in two full runs). Dropping the compiled
# kernels now and then keeps the count low; they are compiled again where used.
_MAP_LIMIT = 30000
_RUN = [0]


def pytest_runtest_teardown(item, nextitem):
    # (the library drops its eager kernels near the limit itself; the suite also holds compiled steps' and
    # its own jax.jit executables, so it drops everything earlier)
    from dynajax._device import mappings
    _RUN[0] += 1
    if _RUN[0] % 20 == 0 and (mappings() or (0,))[0] > _MAP_LIMIT:
        from dynajax.ops.registry import clear_kernels
        clear_kernels()
