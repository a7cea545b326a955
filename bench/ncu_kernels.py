#!/usr/bin/env python3
"""Per-kernel GPU time from Nsight Compute's CSV (bench/gpu-suite, part 3):

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv ... > FILE
    ncu_kernels.py FILE

One row per kernel name (template arguments cut): launches, total and median microseconds,
sorted by total; then the sum. The profiled range is bench/census_step's counted steps (a
training step and a beam-search step), so the sum sits beside the census's estimates
(bench/results/gpu_census-*.txt). Times under ncu are each kernel alone (ncu serialises
launches), without the gaps between launches.
"""
import csv
import gzip
import statistics
import sys


# cuBLAS's matrix-product kernels, by name (bench/ncu_gemms.py, bench/census_vs_measured.py)
GEMM_PREFIXES = ("nvjet", "cutlass", "cublas", "epilogue::", "sm80", "sm90", "ampere")  # epilogue::: cuBLASLt's BGRADB


def launches(path):
    """Every profiled launch in launch order: (kernel name without template arguments, microseconds)."""
    out = []
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as f:
        lines = [line for line in f if line.startswith('"')]   # ncu's own log lines start with ==
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        us = value / 1e3 if unit == "nsecond" or unit == "ns" else value * 1e3 if unit == "msecond" else value
        name = row["Kernel Name"].removeprefix("void ").split("(")[0].split("<")[0]
        out.append((int(row["ID"]), name, us))
    return [(name, us) for _, name, us in sorted(out)]


def main(path):
    times = {}
    for name, us in launches(path):
        times.setdefault(name, []).append(us)
    if not times:
        print("no kernel times in", path)
        return 1
    total = sum(sum(v) for v in times.values())
    print(f"{'kernel':<56} {'launches':>8} {'total us':>10} {'median us':>10} {'share':>6}")
    for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name[:56]:<56} {len(v):>8} {sum(v):>10.1f} {statistics.median(v):>10.2f} {sum(v) / total:>6.1%}")
    print(f"{'sum':<56} {sum(len(v) for v in times.values()):>8} {total:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
