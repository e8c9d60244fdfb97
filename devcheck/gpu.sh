#!/usr/bin/env bash
# One device run (the session tool `device`, ~5 min of its 15): what dynajax's compiled steps do on a
# GPU (benchmarks/compile_step.py), then the compile tests there, at JAX's default matmul precision
# (TF32 on Hopper) and at "highest". Output lands in $OUT (the tool's folder; /tmp elsewhere).
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OUT="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
nproc
python3 -c "import jax, torch, numpy; print('jax', jax.__version__, jax.devices(), 'torch', torch.__version__, 'numpy', numpy.__version__)"
echo "=== compile_step on the GPU (PyTorch eager column: CPU tensors, not comparable)"
timeout 180 python3 benchmarks/compile_step.py --only mlp cnn lstm 2>&1 | tee "$OUT/bench.txt" | grep -v Warning
echo "=== tests on the GPU, default matmul precision"
timeout 120 python3 -m pytest -q -p no:cacheprovider --maxfail=15 tests/test_compile.py 2>&1 | tail -25 | tee "$OUT/tests_default.txt"
echo "=== tests on the GPU, JAX_DEFAULT_MATMUL_PRECISION=highest"
JAX_DEFAULT_MATMUL_PRECISION=highest timeout 120 python3 -m pytest -q -p no:cacheprovider --maxfail=15 tests/test_compile.py tests/test_training_scripts.py 2>&1 | tail -25 | tee "$OUT/tests_highest.txt"
