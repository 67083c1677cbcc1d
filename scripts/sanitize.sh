#!/usr/bin/env bash
# compute-sanitizer over the CUDA tests (docs/RELIABILITY.md): memcheck, racecheck, initcheck
# and synccheck, one process per (tool, test file), small shapes (XPRESS_EXT_SANITIZE=1 shrinks
# the tests' vocabulary), the caching allocator off (with it on, memcheck only sees the
# allocator's big segments and misses writes past a tensor's end), --error-exitcode 1.
# First a canary: a planted out-of-bounds write that memcheck must catch, so a clean run means
# the setup can see one.  compile tests are deselected (they sanitize Inductor's own kernels).
# Graph-capture tests run in their own process with the caching allocator on (see run_one).
#   scripts/sanitize.sh OUTDIR [TOOLS] [TEST FILES...]
# OUTDIR gets summary.txt and logs.tar.gz.  Exit status: non-zero unless the canary is caught
# and every (tool, file) run is clean.  SANITIZE_JOBS (default 6) processes run at a time,
# spread round-robin over the GPU ids in SANITIZE_GPUS (default: all that nvidia-smi lists;
# each process sees one, except test_multi_gpu's, which see them all); SANITIZE_TIMEOUT (default 1800 s)
# bounds each one (a timed-out run counts as not clean).  SANITIZE_SHARDS splits a file's plain
# run over several processes (tests/conftest.py's XPRESS_EXT_SHARD=i/k): a default count and
# per-file overrides, e.g. "2 test_sconv=4 test_add_argmax=4" (default "1").
# SANITIZE_OPTS_<tool> adds compute-sanitizer options to that tool's runs.  SANITIZE_K narrows
# every run to the tests a pytest -k expression also selects (e.g. "cluster_sizes or
# threshold_window" for a change to one path of a kernel); default: no narrowing.
# racecheck instruments only this package's kernels (SANITIZE_KERNELS, default "kns=xpress",
# compute-sanitizer's --kernel-name filter; empty = every kernel): unfiltered, it spends its
# time in torch's own kernels (10-100x longer, timed out) and reports hazards in them (torch's
# argmax reduction, cuBLAS's nvjet kernels).  initcheck must see every kernel: filtered, it
# does not see torch's kernels write the tests' inputs and reports every read of them.
# memcheck and synccheck check every kernel.
set -uo pipefail
out=${1:?usage: scripts/sanitize.sh OUTDIR [TOOLS] [FILES...]}
tools=${2:-memcheck racecheck initcheck synccheck}
shift $(( $# >= 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
mkdir -p "$out/logs"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 XPRESS_EXT_SANITIZE=1
PY=${PYTHON:-python3}
CS=${COMPUTE_SANITIZER:-compute-sanitizer}
kernel_filter=${SANITIZE_KERNELS-kns=xpress}
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(tests/test_*.py)
summary="$out/summary.txt"
: > "$summary"
: > "$out/runs.txt"  # each run's line as it ends (summary.txt gets them sorted at the end)
start=$(date +%s)

"$CS" --tool memcheck --error-exitcode 1 "$PY" scripts/sanitize_canary.py > "$out/logs/canary.log" 2>&1
canary_rc=$?
if [ $canary_rc -ne 0 ] && grep -q "Invalid __global__ write" "$out/logs/canary.log"; then
  echo "canary: caught (memcheck reported the planted out-of-bounds write, exit $canary_rc)" | tee -a "$summary"
  canary_ok=1
else
  echo "canary: NOT caught (exit $canary_rc) -- the sanitizer setup cannot be trusted" | tee -a "$summary"
  tail -n 20 "$out/logs/canary.log"
  canary_ok=0
fi

# Per (tool, file) a plain run (in SANITIZE_SHARDS processes) and a graph run: the tests that
# capture CUDA graphs cannot run with the caching allocator off (an allocation inside a capture
# becomes a cudaMalloc, which capture forbids), so they run in a process with it on; everything
# else runs with it off.
run_one() {  # tool file plain|graphs shard(i/k) gpu
  local tool=$1 file=$2 shard=$4 gpu=$5 name log extra="" sel="not compile and not graph and not replay" caching=1
  name=$(basename "$file" .py)
  if [ "$3" = graphs ]; then
    name="$name-graphs"; sel="(graph or replay) and not compile"; caching=0
  fi
  [ -n "${SANITIZE_K:-}" ] && sel="($sel) and ($SANITIZE_K)"
  [ "$shard" != 0/1 ] && name="$name.shard${shard%/*}of${shard#*/}"
  log="$out/logs/$tool-$name.log"
  local fp32_matmul=0
  # racecheck with the kernel filter dies ("Internal Sanitizer Error: ... hardware exception")
  # in torch's bf16/fp16 cuBLAS kernels, also in a program with no xpress_ext code; float32
  # ones run.  The tests' own half-precision matmuls (references, the head's projections) are
  # then done in float32 (tests/xpress_testing.py Fp32Matmul); this package's kernels are not.
  # initcheck does not see what torch's half-precision cuBLAS kernels write (every read of
  # their outputs is reported, also with no xpress_ext code): the same float32 matmuls there.
  [ "$tool" = racecheck ] && extra="--racecheck-report hazard"
  { [ "$tool" = racecheck ] || [ "$tool" = initcheck ]; } && fp32_matmul=1
  local more="SANITIZE_OPTS_$tool"  # e.g. SANITIZE_OPTS_racecheck="--racecheck-memcpy-async no"
  extra="$extra ${!more:-}"
  if [ -n "$kernel_filter" ] && [ "$tool" = racecheck ]; then
    extra="$extra --kernel-name $kernel_filter"
  fi
  local devices=()
  [ "$gpu" != all ] && devices=(CUDA_VISIBLE_DEVICES="$gpu")
  env "${devices[@]}" XPRESS_EXT_SHARD="$shard" XPRESS_EXT_FP32_MATMUL=$fp32_matmul PYTORCH_NO_CUDA_MEMORY_CACHING=$caching timeout "${SANITIZE_TIMEOUT:-1800}" \
    "$CS" --tool "$tool" $extra --error-exitcode 1 --print-limit 20 \
    "$PY" -m pytest -v --durations=20 -x -m cuda -k "$sel" -p no:cacheprovider "$file" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "$tool $name: TIMED OUT after ${SANITIZE_TIMEOUT:-1800} s (not a clean run)" \
    | tee -a "$out/runs.txt" && return
  local tests errors
  tests=$(grep -Eo "[0-9]+ passed" "$log" | tail -n1)
  errors=$(grep -Eo "(ERROR|RACECHECK) SUMMARY: [0-9]+ (error|hazard)" "$log" | tail -n1)
  # pytest exit 5 = no CUDA tests in the file; compute-sanitizer exits 255 when the program
  # ends before its first CUDA call (a file whose tests are all deselected)
  grep -q "terminated before first instrumented API call" "$log" && rc=5
  echo "$tool $name: exit $rc; ${tests:-0 passed}; ${errors:-no summary}" | tee -a "$out/runs.txt"
}
export -f run_one
export out PY CS SANITIZE_TIMEOUT SANITIZE_K kernel_filter ${!SANITIZE_OPTS_*}
shards_of() {  # file -> number of processes for its plain run
  local n=1 entry base
  base=$(basename "$1" .py)
  for entry in ${SANITIZE_SHARDS:-1}; do
    case "$entry" in
      *=*) [ "${entry%%=*}" = "$base" ] && { echo "${entry#*=}"; return; } ;;
      *) n=$entry ;;
    esac
  done
  echo "$n"
}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
[ "${ngpu:-0}" -ge 1 ] 2>/dev/null || ngpu=1
read -ra gpus <<< "${SANITIZE_GPUS:-$(seq -s " " 0 $((ngpu - 1)))}"
job=0
for tool in $tools; do
  for f in "${files[@]}"; do
    k=$(shards_of "$f")
    runs=()
    for ((i = 0; i < k; i++)); do runs+=("plain $i/$k"); done
    grep -qE "def test_[a-z0-9_]*(graph|replay)" "$f" && runs+=("graphs 0/1")
    for r in "${runs[@]}"; do
      gpu=${gpus[$(( job++ % ${#gpus[@]} ))]}
      case "$f" in *test_multi_gpu*) gpu=all ;; esac
      echo "$tool $f $r $gpu"
    done
  done
done | xargs -P "${SANITIZE_JOBS:-6}" -L 1 bash -c 'run_one "$0" "$1" "$2" "$3" "$4"' | sort | tee -a "$summary"

echo "wall time: $(( $(date +%s) - start )) s" | tee -a "$summary"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$out/logs"
bad=$(grep -Ev "exit (0|5);" "$summary" | grep -c "^[a-z]*check ")
echo "runs with errors: $bad" | tee -a "$summary"
[ "$canary_ok" -eq 1 ] && [ "$bad" -eq 0 ]
