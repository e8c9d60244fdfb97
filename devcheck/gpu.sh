#!/usr/bin/env bash
# One device run (the session tool `device`, ~9 min of its 15: timeout_s 580; one command may run 600 s at most): dynajax's compiled steps on a
# GPU against hand-written jax.jit and PyTorch eager on the same GPU (benchmarks/compile_step.py), then the tests
# at JAX's default matmul precision (TF32 on Hopper; dynajax's own matmuls and convolutions ask for HIGHEST)
# and the whole suite with JAX_DEFAULT_MATMUL_PRECISION=highest, then the recurrent workloads. Output lands
# in $OUT (the tool's folder; /tmp elsewhere). Each stage has its own time limit; pytest gets SIGINT at its
# limit so it still prints its summary.
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT="${OUT:-/tmp}" XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
nproc
python3 -c "import jax, torch, numpy; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__, 'numpy', numpy.__version__)"
echo "=== compile_step on the GPU (replay=True among the contenders; tiny: per-call overhead)"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 140 python3 benchmarks/compile_step.py --rounds 3 --only mlp cnn tiny \
    2>&1 | grep -v Warning | tee "$OUT/bench.txt"
echo "=== where a speculated MLP call's time goes on the GPU (2026-12-04: capture ~0.6 ms, the step ~0.2: nothing to overlap)"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 50 python3 devcheck/speculate_profile.py --calls 100 \
    2>&1 | grep -v Warning | tee "$OUT/speculate_profile.txt"
echo "=== a replayed step's executable call against hand-written jax.jit's (Python numbers as device arrays)"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 45 python3 devcheck/dispatch_profile.py --calls 150 \
    2>&1 | grep -v Warning | tee "$OUT/dispatch.txt"
echo "=== tests/test_compile.py on the GPU, default matmul precision"
timeout -s INT 50 python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n 4 --tb=short tests/test_compile.py 2>&1 | tee "$OUT/tests_default.txt" | tail -30
echo "=== the whole suite on the GPU, JAX_DEFAULT_MATMUL_PRECISION=highest"
# -v: each result is written as it comes, so a run stopped at its limit still names what failed
JAX_DEFAULT_MATMUL_PRECISION=highest timeout -s INT 160 python3 -m pytest -v -p no:cacheprovider -p no:benchmark -n 8 \
    --tb=short -rfEs tests > "$OUT/suite.txt" 2>&1
grep -E "^FAILED|^ERROR|^SKIPPED| passed| failed" "$OUT/suite.txt" | cut -c1-230 | tail -45
echo "=== compile_step on the GPU, the recurrent workloads"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 100 python3 benchmarks/compile_step.py --rounds 2 --steps 5 --only lstm cell \
    2>&1 | grep -v Warning | tee "$OUT/bench2.txt"
