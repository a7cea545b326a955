#!/usr/bin/env python3
"""The census's estimate beside a GPU's measurement, kernel by kernel:

    census_vs_measured.py CENSUS_RESULT KERNEL_TIMES

CENSUS_RESULT: a bench/results/gpu_census-*.txt (its "## training step" table, an H100 SXM
estimate); KERNEL_TIMES: bench/ncu_kernels.py's table of the same step measured on a GPU
(bench/gpu-suite, part 3), which also holds one beam-search step (a few per-row kernels more).
Prints per kernel the estimate, the measurement and their ratio, the matrix products together
(cuBLAS's kernel names), and the totals: how far the census's model is from the card, to read
its estimates with (docs/gpus.md, "Measured on a GPU"). The card need not be an H100: say which.
"""
import re
import sys

from ncu_kernels import GEMM_PREFIXES


def estimates(path):
    kernels, gemm_ms, step_ms = {}, None, None
    with open(path) as f:
        text = f.read()
    section = text.split("## training step", 1)[1].split("## ", 1)[0]
    in_table = True
    for line in section.splitlines():
        fields = line.split()
        if in_table and len(fields) > 12 and fields[1].isdigit():
            name = fields[0].split("<")[0]  # as ncu_kernels names them: no template arguments
            n, ms = kernels.get(name, (0, 0.0))
            kernels[name] = (n + int(fields[1]), ms + float(fields[12]))
        elif line.startswith("GEMMs"):
            in_table = False
            gemm_ms = float(re.search(r"\)\s+([\d.]+)", line).group(1))
        elif line.startswith("step estimate"):
            step_ms = float(re.search(r"step estimate ([\d.]+)", line).group(1))
    return kernels, gemm_ms, step_ms


def measured(path):
    times = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4 and fields[1].isdigit() and fields[0] != "sum" and re.fullmatch(r"[\d.]+", fields[2]):
                times[fields[0]] = (int(fields[1]), float(fields[2]) / 1e3)
    return times


def main(census_path, measured_path):
    est, gemm_est, step_est = estimates(census_path)
    meas = measured(measured_path)
    gemm_meas = sum(ms for name, (_, ms) in meas.items() if name.startswith(GEMM_PREFIXES))
    print(f"{'kernel':32} {'est launches':>12} {'est ms':>8} {'meas launches':>13} {'meas ms':>8} {'meas/est':>8}")
    rows = [(name, e, meas.get(name)) for name, e in est.items()]
    rows += [(name, None, m) for name, m in meas.items() if name not in est and not name.startswith(GEMM_PREFIXES)]
    for name, e, m in sorted(rows, key=lambda r: -(r[2][1] if r[2] else 0)):
        ratio = f"{m[1] / e[1]:8.2f}" if e and m and e[1] > 0 else f"{'':>8}"
        print(f"{name[:32]:32} {e[0] if e else '':>12} {e[1] if e else '':>8} {m[0] if m else '':>13} "
              f"{m[1] if m else 0:8.3f} {ratio}")
    kernel_est = sum(e[1] for e in est.values())
    kernel_meas = sum(ms for name, (_, ms) in meas.items() if not name.startswith(GEMM_PREFIXES))
    print(f"{'kernels (ours)':32} {'':>12} {kernel_est:8.3f} {'':>13} {kernel_meas:8.3f} {kernel_meas / kernel_est:8.2f}")
    print(f"{'matrix products (cuBLAS)':32} {'':>12} {gemm_est:8.3f} {'':>13} {gemm_meas:8.3f} {gemm_meas / gemm_est:8.2f}")
    print(f"{'step (kernel time only)':32} {'':>12} {step_est:8.3f} {'':>13} {kernel_meas + gemm_meas:8.3f} "
          f"{(kernel_meas + gemm_meas) / step_est:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
