#!/usr/bin/env python3
"""Which cuBLAS kernel ran each matrix product of the counted training step, and how fast
(bench/gpu-suite, part 3):

    ncu_gemms.py CUBLAS_LOG NCU_CSV

CUBLAS_LOG: cuBLAS's own call log of one bench/census_step run (CUBLAS_LOGINFO_DBG=1
CUBLAS_LOGDEST_DBG=FILE; gzip accepted), the warm-up step, the counted step and the beam steps.
NCU_CSV: ncu's CSV of another run of the same command (--profile-from-start off, metric
gpu__time_duration.sum; gzip accepted), which holds only the counted steps. The training step's
calls are the second of the longest two identical runs of calls that open the log; its kernels are the first
matrix-product kernels in the CSV, one per call (cuBLAS's split-K reductions are added to the
product before them). Prints one row per shape: calls, kernel(s), microseconds and TFLOP/s.
"""
import collections
import gzip
import re
import sys

from ncu_kernels import GEMM_PREFIXES, launches


def text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read()


def gemm_calls(log):
    calls = []
    for block in log.split("I! cuBLAS")[1:]:
        head = block.split("\n", 1)[0]
        if "Gemm" not in head:
            continue
        v = dict(re.findall(r"i!  (\w+): type=[^;]*; val=([^\n]*)", block))
        op = lambda s: "T" if "OP_T" in s else "N"
        calls.append((op(v["transa"]), op(v["transb"]), int(v["m"]), int(v["n"]), int(v["k"]),
                      v.get("Atype", "?").split("_")[-1].split("(")[0], v.get("Ctype", "?").split("_")[-1].split("(")[0],
                      v.get("beta", "")))
    return calls


def main(log_path, csv_path):
    calls = [c[:7] for c in gemm_calls(text(log_path))]
    step = next((t for t in range(len(calls) // 2, 0, -1) if calls[:t] == calls[t:2 * t]), None)
    if step is None:
        print("no two identical training steps in", log_path)
        return 1
    products = []
    for name, us in launches(csv_path):
        if not name.startswith(GEMM_PREFIXES):
            continue
        if "splitKreduce" in name and products:
            products[-1][1] += us
        else:
            products.append([name, us])
    if len(products) < step:
        print(f"{len(products)} matrix-product kernels in the profile, fewer than the step's {step} calls")
        return 1
    rows = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
    for call, (name, us) in zip(calls[step:2 * step], products):
        r = rows[call]
        r[0] += 1
        r[1] += us
        r[2][name[:34]] += 1
    total_us = sum(r[1] for r in rows.values())
    total_flop = sum(2.0 * c[2] * c[3] * c[4] * r[0] for c, r in rows.items())
    print(f"{step} matrix products in the training step: {total_us / 1e3:.2f} ms, {total_flop / total_us / 1e6:.0f} TFLOP/s")
    print(f"{'op':<3} {'m':>6} {'n':>6} {'k':>6} {'A->C':<10} {'calls':>5} {'total us':>9} {'TFLOP/s':>8}  kernels")
    for c, (n, us, names) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        tflops = 2.0 * c[2] * c[3] * c[4] * n / us / 1e6
        kinds = ", ".join(f"{name} x{count}" for name, count in names.most_common())
        print(f"{c[0]}{c[1]:<2} {c[2]:>6} {c[3]:>6} {c[4]:>6} {c[5] + '->' + c[6]:<10} {n:>5} {us:>9.1f} {tflops:>8.1f}  {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
