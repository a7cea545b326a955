#!/usr/bin/env bash
# bench/gpu-lease.sh: a short lease's checks on the binaries bench/gpu-pack built (after the
# full bench/gpu-suite has run once on a card): the engine suites, 3 timed base steps, per-kernel
# times (ncu), ncu's warp-state and source sections on the short pairs' attention kernels, memcheck
# over the backend and decode suites. Run there as `bench/gpu-pack --run lease` (which unpacks the
# libraries and the corpus first); results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
export ATTENTION_CUDA_LIBRARY=./attention_cuda.so
step="bench/census_step 25000 64 --precision bf16"
{
  echo "# bench/gpu-lease.sh, $(date -u +%FT%TZ), commit $(cat .gpu/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  ATTENTION_TEST_SUITES=ops,backend,model,decode,precision,marian,quantize timeout 100 \
    ./test/engine/run_tests test/fixtures cuda ./attention_cuda.so 2>&1 | grep "checks\|FAIL"
  for i in 1 2 3; do timeout 30 $step | grep timed; done
  timeout 75 ncu --profile-from-start off --metrics gpu__time_duration.sum --clock-control none \
    --cache-control none --csv $step > "$out/ncu.csv"
  python3 bench/ncu_kernels.py "$out/ncu.csv"
  for k in 'attention_short_kernel' 'attention_short_backward'; do   # the base step's pairs are all short
    timeout 60 ncu --section WarpStateStats --section SourceCounters --section InstructionStats \
      --section Occupancy --section SpeedOfLight -k "regex:$k" -c 2 $step 2>&1 \
      | grep -v "^==PROF==\|^==WARNING==\|^    ---" > "$out/ncu-sections-${k//[^a-z]/}.txt"
    grep -A12 "Warp State\|Source Counters" "$out/ncu-sections-${k//[^a-z]/}.txt" | head -60
  done
  ATTENTION_TEST_SUITES=backend,decode timeout 110 compute-sanitizer --tool memcheck --print-limit 5 \
    ./test/engine/run_tests test/fixtures cuda ./attention_cuda.so 2>&1 | grep "checks\|SUMMARY\|Invalid" | head
} 2>&1 | tee "$out/gpu-lease.txt"
