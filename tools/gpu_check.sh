#!/usr/bin/env bash
# The CUDA checks, as one script for a GPU machine (see docs/tensors.md and docs/data-plane.md).
#
#   OUT=/tmp/gpu-out bash tools/gpu_check.sh [pytest paths...]
#
# Runs from the repository root with src/ on PYTHONPATH (no install), on a Python that already
# has torch with CUDA, numpy, cloudpickle, uvloop, psutil, pytest and pytest-timeout. Writes
# env.txt, pytest.txt and bench-*.txt under $OUT and prints a summary; exits with pytest's status.
set -u
OUT=${OUT:-/tmp/regency-gpu-out}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH="$PWD/src:$PWD/tests/gpu:$PWD"
export PYTHONDONTWRITEBYTECODE=1

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  "$PY" -c 'import sys, torch, torch.distributed as d; print(sys.version.split()[0], torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(), "nccl", d.is_nccl_available())'
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if [ $# -eq 0 ]; then
  set -- tests/gpu tests/integration/test_rdma_torch.py tests/integration/test_tensor_engine.py
fi
timeout "${PYTEST_LIMIT:-330}" "$PY" -m pytest -q -p no:cacheprovider --timeout 120 "$@" \
  >"$OUT/pytest.txt" 2>&1
rc=$?
tail -n 40 "$OUT/pytest.txt"

for bench in ${BENCHES:-}; do
  timeout "${BENCH_LIMIT:-90}" "$PY" -m "benchmarks.$bench" >"$OUT/bench-$bench.txt" 2>&1
  echo "== benchmarks.$bench (rc $?)"; tail -n 25 "$OUT/bench-$bench.txt"
done
exit $rc
