#!/usr/bin/env bash
# On a GPU machine, one command: build if needed, run the whole test suite with the CUDA ops,
# then the self-check timings of every op against eager torch, then the main job (draft steps
# against the eager reference head).  Logs and results go to OUTDIR:
#   env.txt build.log pytest.log junit.xml selfcheck.md selfcheck.json draft.md draft.json
# Exit status: non-zero if the build, any test or any self-check fails.
# An abi3 build carried from another machine (xpress_ext/_C.abi3.so) is used when it loads
# and has its CUDA kernels; otherwise the extension is built here (MAX_JOBS, default 16).
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  "$PY" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"
if "$PY" -c "import sys, xpress_ext; sys.exit(0 if xpress_ext.has_cuda_kernels() else 1)" > "$out/build.log" 2>&1; then
  echo "using the carried build: $(ls xpress_ext/_C*.so)" | tee -a "$out/build.log"
else
  echo "building here" | tee -a "$out/build.log"
  rm -f xpress_ext/_C*.so
  MAX_JOBS=${MAX_JOBS:-16} "$PY" -m pip install --no-build-isolation --no-deps -e . >> "$out/build.log" 2>&1 \
    || { tail -n 60 "$out/build.log"; echo "BUILD FAILED"; exit 2; }
fi
"$PY" -m pytest -q tests -rs -p no:cacheprovider --junitxml="$out/junit.xml" 2>&1 | tee "$out/pytest.log"
tests_rc=${PIPESTATUS[0]}
"$PY" -m xpress_ext.selfcheck --json "$out/selfcheck.json" 2>&1 | tee "$out/selfcheck.md"
check_rc=${PIPESTATUS[0]}
"$PY" -m xpress_ext --json "$out/draft.json" 2>&1 | tee "$out/draft.md"
draft_rc=${PIPESTATUS[0]}
echo "pytest exit $tests_rc, self-check exit $check_rc, draft steps exit $draft_rc"
exit $(( tests_rc != 0 || check_rc != 0 || draft_rc != 0 ))
