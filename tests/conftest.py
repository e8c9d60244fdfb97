"""Test configuration: a fixed, derandomized hypothesis profile so runs are repeatable, and XLA's cheaper
LLVM optimization for the suite's many small kernels.

Most of the suite's time is XLA compiling small kernels; the tests check values, not speed, so XLA's
backend (LLVM) optimization is turned down for them (measured: op-table and layer tests 176 -> 155 s).
Set before jax is imported; subprocesses the tests start inherit it."""
import os

# full float32 matmuls where the default is lower (TF32 on GPUs): the tests compare values at float32 tolerances
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
                           " --xla_llvm_disable_expensive_passes=true").strip()

from hypothesis import HealthCheck, settings

settings.register_profile("dynajax", derandomize=True, max_examples=25, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dynajax"))
