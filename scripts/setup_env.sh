#!/usr/bin/env bash
# Installs what building and testing need (torch 2.11.0, build tools, pytest) and builds the
# extension in place (CUDA kernels too when nvcc is present).  Skips the build when the
# compiled library is newer than every source file.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q "torch==2.11.0" "setuptools>=64" wheel ninja pytest numpy safetensors
so=$(ls xpress_ext/_C*.so 2>/dev/null | head -n 1 || true)
if [ -n "$so" ] && [ -z "$(find csrc setup.py -newer "$so" -type f | head -n 1)" ]; then
  echo "xpress_ext: $so is up to date"
else
  MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" -m pip install -q --no-build-isolation --no-deps -e .
fi
