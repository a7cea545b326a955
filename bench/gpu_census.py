"""gpu_census.py - the census of bench/gpu_census, scaled to the base step and
priced on an H100 SXM. An ESTIMATE from counted traffic and one documented
model (docs/gpus.md, "The census"), never a measurement.

  gpu_census.py CENSUS_1 OUT_1 CENSUS_2 OUT_2 [--tokens 25000] [--sentences 64] [--host-ms MS]

CENSUS_i: the census file of a run of bench/gpu_census at a size; OUT_i: its
stdout (sentences and tokens). Every per-launch count is taken as linear in
the size (a + b * tokens, through the two runs: weights and other fixed
traffic stay fixed, per-token traffic scales) and evaluated at --tokens per
side for the training step and at --sentences for the beam-search step.
--host-ms: the host's work before the training step's first launch, measured
(bench/census_step --host); the GPU idles for what the optimizer's kernel,
queued before it, does not cover.

The training step is also given calibrated by the card: each kernel's estimate times
its measured/estimated factor in the latest lease's comparison (CALIBRATION,
bench/census_vs_measured.py's output), a kernel that lease did not run at the factor
of the kernels it replaced (REPLACED), else at that of our kernels as a whole; the
matrix products at theirs. Still an estimate: what that card would likely show.

  gpu_census.py --counts CENSUS

prints, per section of one census, its launches, GEMMs (and how many of them
have an operand off 16 bytes), host synchronisations, allocations and frees
(the test command's smoke census).
"""
import math
import os
import re
import sys
from collections import OrderedDict

# The H100 model. NVIDIA's published figures (H100 SXM5 datasheet and the
# Hopper architecture whitepaper):
HBM_BW = 3.35e12            # bytes/s, HBM3
BF16_DENSE = 989.4e12       # FLOP/s, dense bf16 tensor cores (wgmma: cuBLAS)
FP32 = 66.9e12              # FLOP/s, non-tensor fp32 (cublasSgemm)
SMS = 132
L2_BYTES = 50e6
PCIE_BW = 64e9              # bytes/s one way, PCIe 5.0 x16
# Not published by NVIDIA; from microbenchmarks (Luo et al. 2024, "Benchmarking
# and Dissecting the Nvidia Hopper GPU Architecture"), rounded:
L2_BW = 5.5e12              # bytes/s, L2 to SMs
L1_BW = 128 * SMS * 1.83e9  # bytes/s: 128 bytes per clock and SM (A100 whitepaper's L1 figure);
                            # shared memory is the same SRAM: a wavefront (32 banks x 4 bytes) is 128 bytes of it
ACCESS_LATENCY = 150e-9     # s per access of one thread's serial chain (~270 cycles, an L2 hit)
# Measured on an H200 (2026-11-26, bench/results/gpu-kernels-h200-20261126-before.txt): products with
# an operand or row stride off 16 bytes ran on sm_80 kernels at 150-260 TFLOP/s, aligned ones at
# 500-780 on Hopper's; such a product is priced at 3 times its aligned cost.
MISALIGNED_GEMM = 3.0
# Our kernels' wmma (mma.sync; NVIDIA publishes no Hopper figure for it): A100's published per-SM
# rate, 2,048 dense bf16 FLOP per clock (312 TFLOP/s over 108 SMs at 1.41 GHz), at 132 SMs and
# 1.83 GHz: 495 TFLOP/s, half of wgmma's
MMA_SYNC = 2048 * SMS * 1.83e9
MMA_FLOP = 2 * 16 * 16 * 16     # one warp's wmma::mma_sync (census.h: mma=)
MMA8_FLOP = 2 * 16 * 8 * 16     # one warp's PTX mma.sync.m16n8k16 (census.h: mma8=; kernels/mma.cuh)
# Dropout's Philox4x32-10 blocks (census.h: philox=, one per lane and block) at the 4 schedulers' issue rate
# of one warp instruction a clock each: ~80 instructions a block (10 rounds of 2 IMAD.HI, 2 IMAD, 2 three-way
# XORs and 2 key adds; nvcc's PTX has 104 with the XORs apart). A floor: each round waits on the last, so a
# kernel of few warps stalls longer (the H200's tensor-core attention, 2026-11-26: 10 cycles a warp's instruction)
PHILOX_INSTR = 80
ISSUE = 4 * 32 * SMS * 1.83e9   # lane-instructions per second
# Assumptions of this model:
MIN_KERNEL = 2e-6           # s: no launch finishes faster (launch latency and tail)
SYNC_COST = 10e-6           # s per host synchronisation: the stream drains, the host waits
# The GPU's own time between two kernels of one stream, and what a CUDA graph leaves of it. NVIDIA's
# "Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs, V100): kernels of 2.9 us
# issued back to back on a stream took 3.8 us each, the same kernels replayed from a graph 3.4 us.
LAUNCH_GAP = 0.9e-6         # s per launch (kernel or product) on a stream
GRAPH_GAP = 0.5e-6          # s per launch from a CUDA graph

# The card's word on the model: bench/census_vs_measured.py of the latest lease with per-kernel times
# (an H200, 2026-11-28, commit 02cb4be), and the kernels written since in place of ones it measured.
CALIBRATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "census-vs-h200-20261128.txt")
REPLACED = {"attention_short_kernel": ("attention_mma_kernel",),
            "attention_short_backward_kernel": ("attention_dq_mma_kernel", "attention_dkv_mma_kernel")}

RECORD = re.compile(r"(\w+)=(\S+)")


def mma_flops(n):
    """A launch's tensor-core FLOPs in our kernels (wmma and PTX mma.sync alike)."""
    return n.get("mma", 0) * MMA_FLOP + n.get("mma8", 0) * MMA8_FLOP


def parse(census_path, out_path):
    sections, cur = {}, None
    for line in open(census_path):
        kind, _, rest = line.strip().partition(" ")
        fields = dict(RECORD.findall(rest))
        if kind == "mark":
            label = fields["label"]
            if label.endswith("-begin"):
                cur = sections.setdefault(label[:-6], [])
            else:
                cur = None
        elif cur is not None:
            cur.append((kind, fields))
    info = {}
    for line in open(out_path):
        kind, _, rest = line.strip().partition(" ")
        if kind in ("train", "decode"):
            info[kind] = {k: float(v) for k, v in RECORD.findall(rest)}
    return sections, info


def numbers(fields):
    out = {}
    for k, v in fields.items():
        if k in ("grid", "block"):
            x, y, z = (int(a) for a in v.split("x"))
            out[k] = x * y * z
        else:
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def extrapolate(recs1, recs2, size1, size2, size):
    """Each record's numbers as a + b * size through the two runs."""
    if [(k, f.get("name")) for k, f in recs1] != [(k, f.get("name")) for k, f in recs2]:
        sys.exit("gpu_census: the two runs issued different sequences of operations; cannot scale")
    out = []
    for (kind, f1), (_, f2) in zip(recs1, recs2):
        n1, n2 = numbers(f1), numbers(f2)
        n = {k: max(0.0, n1[k] + (n2[k] - n1[k]) * (size - size1) / (size2 - size1)) for k in n1}
        n["name"] = f1.get("name", kind)
        n["threads"] = n1.get("block", 0)   # threads per block do not scale
        n["type"] = f1.get("type")
        n["out"] = f1.get("out")
        if "aligned" in n1:                 # a flag, not a count: misaligned at either size
            n["aligned"] = min(n1["aligned"], n2["aligned"])
        out.append((kind, n))
    return out


def kernel_time(n):
    """A launch's time: the slowest of its L1 (with shared memory), L2 and DRAM traffic and its serial chain."""
    l1 = 32 * (n["rsec"] + n["wsec"]) + 128 * n.get("swave", 0)  # every warp instruction's sectors, wavefronts
    l2 = 32 * n["bsec"]                     # each block's distinct sectors (L1 holds a block's data)
    unique = 32 * n["unique"]
    miss = max(0.0, 1 - L2_BYTES / unique) if unique else 0.0
    dram = unique + max(0.0, l2 - unique) * miss   # re-reads miss in the share L2 cannot hold
    fill = max(min(1.0, n["grid"] / SMS), 1e-9)
    t_mem = max(dram / HBM_BW, l2 / L2_BW, l1 / L1_BW) / fill
    t_chain = n["chain"] * ACCESS_LATENCY
    t_mma = mma_flops(n) / MMA_SYNC / fill
    t_rng = n.get("philox", 0) * PHILOX_INSTR / ISSUE / fill
    return max(t_mem, t_chain, t_mma, t_rng, MIN_KERNEL), dram, t_chain > max(t_mem, t_mma, t_rng)


def gemm_cost(n):
    es = 2 if n["type"] == "bf16" else 4
    cs = 2 if n.get("out") == "bf16" else 4     # C's element (records before "out" wrote fp32)
    m, nn, k, b = n["m"], n["n"], n["k"], n["batch"]
    flops = 2 * m * nn * k * b
    byts = ((m * k + k * nn) * es + m * nn * cs * (1 + n["beta"])) * b
    peak = BF16_DENSE if n["type"] == "bf16" else FP32
    slow = MISALIGNED_GEMM if not n.get("aligned", 1) else 1.0
    return max(slow * flops / peak, slow * byts / HBM_BW, MIN_KERNEL), flops, byts


def price(recs):
    kernels = OrderedDict()
    totals = dict(launches=0, gemms=0, misaligned=0, syncs=0, mallocs=0, frees=0, h2d=0.0, d2h=0.0, d2d=0.0,
                  t_kernels=0.0, t_gemm=0.0, t_other=0.0, flops=0.0)
    for kind, n in recs:
        if kind == "launch":
            t, dram, chained = kernel_time(n)
            k = kernels.setdefault(n["name"], dict(launches=0, blocks=0, threads=n["threads"], sectors=0.0, bsec=0.0,
                                                   unique=0.0, dram=0.0, rreq=0.0, wreq=0.0, lanes=0.0,
                                                   chain=0.0, t=0.0, t_chain=0.0, swave=0.0, sreq=0.0, mma=0.0,
                                                   philox=0.0))
            k["launches"] += 1
            k["blocks"] = max(k["blocks"], n["grid"])
            k["sectors"] += n["rsec"] + n["wsec"]
            k["bsec"] += n["bsec"]
            k["unique"] += n["unique"]
            k["dram"] += dram
            k["rreq"] += n["rreq"]
            k["wreq"] += n["wreq"]
            k["lanes"] += n["lanes"]
            k["swave"] += n.get("swave", 0)
            k["sreq"] += n.get("sreq", 0)
            k["mma"] += mma_flops(n)
            k["philox"] += n.get("philox", 0)
            k["chain"] = max(k["chain"], n["chain"])
            k["t"] += t
            k["t_chain"] += t if chained else 0
            totals["launches"] += 1
            totals["t_kernels"] += t
        elif kind == "gemm":
            t, flops, _ = gemm_cost(n)
            totals["gemms"] += 1
            totals["misaligned"] += 0 if n.get("aligned", 1) else 1
            totals["t_gemm"] += t
            totals["flops"] += flops
        elif kind == "sync":
            totals["syncs"] += 1
            totals["t_other"] += SYNC_COST
        elif kind == "malloc":
            totals["mallocs"] += 1
        elif kind == "free":
            totals["frees"] += 1
        elif kind == "copy":
            totals[n["kind_name"] if n["kind_name"] in ("h2d", "d2h") else "d2d"] += n["bytes"]
        elif kind == "memset":
            totals["d2d"] += n["bytes"] / 2
    totals["t_other"] += (totals["h2d"] + totals["d2h"]) / PCIE_BW + 2 * totals["d2d"] / HBM_BW
    return kernels, totals


def calibration(path):
    """Per kernel (estimated ms, measured ms), and the totals of ours and of the products, from CALIBRATION."""
    rows, totals = {}, {}
    for line in open(path):
        if line.startswith("#"):
            continue
        for key, label in (("ours", "kernels (ours)"), ("gemm", "matrix products (cuBLAS)")):
            if line.startswith(label):
                est, meas = (float(x) for x in line[len(label):].split()[:2])
                totals[key] = (est, meas)
        fields = line.split()
        if len(fields) == 6 and all(re.fullmatch(r"[\d.]+", f) for f in fields[1:]):
            rows[fields[0]] = (float(fields[2]), float(fields[4]))
    return rows, totals


def factor(name, rows, totals):
    """A kernel's measured/estimated factor: its own, else that of the kernels it replaced, else our kernels'."""
    base = name.split("<")[0]
    pairs = [rows[base]] if base in rows else [rows[r] for r in REPLACED.get(base, ()) if r in rows]
    est, meas = (sum(p[0] for p in pairs), sum(p[1] for p in pairs)) if pairs else totals["ours"]
    return meas / est


def calibrated(kernels, totals, step, flops):
    """The training step's estimate times the card's factors (CALIBRATION): a line for report."""
    rows, cal = calibration(CALIBRATION)
    ours = sum(k["t"] * factor(name, rows, cal) for name, k in kernels.items())
    gemm = totals["t_gemm"] * cal["gemm"][1] / cal["gemm"][0]
    rest = step - totals["t_kernels"] - totals["t_gemm"]
    attention = [(name, k["t"], factor(name, rows, cal)) for name, k in kernels.items() if name.startswith("attention")]
    total = ours + gemm + rest
    print(f"calibrated by the card ({os.path.basename(CALIBRATION)}): step {total * 1e3:.1f} ms: kernels "
          f"{ours * 1e3:.1f}, GEMMs {gemm * 1e3:.1f}, rest {rest * 1e3:.1f}; MFU {flops / total / BF16_DENSE * 100:.1f}%; "
          "attention " + ", ".join(f"{n.split('<')[0]} {t * 1e3:.2f} x {f:.2f}" for n, t, f in attention) +
          " (a kernel the card did not run at its predecessors' factor); an ESTIMATE of what that card would show")


def report(title, kernels, totals, extra_flops, host_ms=None):
    launches = totals["launches"] + totals["gemms"]
    gaps = launches * LAUNCH_GAP
    idle = 0.0
    if host_ms is not None:         # the optimizer's kernel runs while the host lays out the next batch
        adam = sum(k["t"] for name, k in kernels.items() if name.startswith("adam"))
        idle = max(0.0, host_ms / 1e3 - adam)
    step = totals["t_kernels"] + totals["t_gemm"] + totals["t_other"] + gaps + idle
    flops = totals["flops"] + extra_flops
    print(f"## {title}")
    print(f"{'kernel':32} {'launches':>8} {'blocks':>9} {'thr':>4} {'GB L1':>8} {'GB shm':>8} {'GB L2':>8} {'GB uniq':>8} "
          f"{'reread':>6} {'B/req':>6} {'lanes':>5} {'chain':>9} {'est ms':>8} {'share':>6}  notes")
    for name, k in sorted(kernels.items(), key=lambda kv: -kv[1]["t"]):
        req = k["rreq"] + k["wreq"]
        reread = k["bsec"] / k["unique"] if k["unique"] else 0
        notes = []
        if reread > 4 and k["bsec"] * 32 > 1e8:
            notes.append(f"re-reads x{reread:.0f}")
        if k["t_chain"] > 0.5 * k["t"] and k["t"] > 1e-4:
            notes.append(f"serial chain of {k['chain']:.0f} accesses")
        if k["blocks"] < SMS:
            notes.append(f"{k['blocks']:.0f} blocks for {SMS} SMs")
        if req and 32 * k["sectors"] / req > 256:
            notes.append("uncoalesced")
        if k["mma"]:
            notes.append(f"tensor cores {k['mma'] / 1e12:.2f} TFLOP (mma.sync at {MMA_SYNC / 1e12:.0f} TFLOP/s)")
        if k["philox"] * PHILOX_INSTR / ISSUE > 0.5 * k["t"] and k["t"] > 1e-4:
            notes.append(f"issue-bound: {k['philox'] / 1e6:.0f} M Philox blocks")
        if 128 * k["swave"] > 32 * k["sectors"] and k["t"] > 1e-4:
            notes.append(f"shared-memory bound ({k['swave'] / k['sreq']:.1f} wavefronts per instruction)")
        print(f"{name[:32]:32} {k['launches']:8d} {k['blocks']:9.0f} {k['threads']:4.0f} {32 * k['sectors'] / 1e9:8.3f} "
              f"{128 * k['swave'] / 1e9:8.3f} "
              f"{32 * k['bsec'] / 1e9:8.3f} {32 * k['unique'] / 1e9:8.3f} {reread:6.1f} {32 * k['sectors'] / req if req else 0:6.0f} "
              f"{k['lanes'] / req if req else 0:5.1f} {k['chain']:9.0f} {k['t'] * 1e3:8.3f} "
              f"{k['t'] / step * 100:5.1f}%  {'; '.join(notes)}")
    print(f"{'GEMMs (cuBLAS, ' + str(totals['gemms']) + ' calls)':32} {'':>87} {totals['t_gemm'] * 1e3:8.3f} "
          f"{totals['t_gemm'] / step * 100:5.1f}%" +
          (f"  {totals['misaligned']} with an operand off 16 bytes (priced x{MISALIGNED_GEMM:.0f})"
           if totals["misaligned"] else ""))
    print(f"{'copies, memsets, host syncs':32} {'':>87} {totals['t_other'] * 1e3:8.3f} "
          f"{totals['t_other'] / step * 100:5.1f}%")
    print(f"{'launch gaps (' + str(launches) + ' x ' + format(LAUNCH_GAP * 1e6, '.1f') + ' us)':32} {'':>87} "
          f"{gaps * 1e3:8.3f} {gaps / step * 100:5.1f}%  a CUDA graph would save "
          f"{launches * (LAUNCH_GAP - GRAPH_GAP) * 1e3:.2f} ms ({launches * (LAUNCH_GAP - GRAPH_GAP) / step * 100:.1f}%)")
    if host_ms is not None:
        print(f"{'host before the first launch':32} {'':>87} {idle * 1e3:8.3f} {idle / step * 100:5.1f}%  "
              f"{host_ms:.2f} ms measured on this CPU, less the optimizer's {adam * 1e3:.2f} ms queued before it")
    print(f"step estimate {step * 1e3:.1f} ms: kernels {totals['t_kernels'] * 1e3:.1f}, GEMMs {totals['t_gemm'] * 1e3:.1f}, "
          f"other {totals['t_other'] * 1e3:.1f}, launch gaps {gaps * 1e3:.1f}"
          + (f", host {idle * 1e3:.1f}" if host_ms is not None else "") +
          f"; {flops / 1e12:.2f} TFLOP -> MFU {flops / step / BF16_DENSE * 100:.1f}%")
    if host_ms is not None:         # the training step
        calibrated(kernels, totals, step, flops)
    print(f"launches {totals['launches']} kernels + {totals['gemms']} GEMMs; host synchronisations {totals['syncs']}; "
          f"device allocations {totals['mallocs']}, frees {totals['frees']}; copied host->device "
          f"{totals['h2d'] / 1e6:.2f} MB, device->host {totals['d2h'] / 1e6:.2f} MB")
    print()
    return step


def main(argv):
    if argv[:1] == ["--counts"]:
        return counts(argv[1])
    args = [a for a in argv if not a.startswith("--")]
    opts = dict(tokens=25000.0, sentences=64.0)
    host_ms = None
    for i, a in enumerate(argv):
        if a == "--host-ms":
            host_ms = float(argv[i + 1])
            args.remove(argv[i + 1])
        if a in ("--tokens", "--sentences"):
            opts[a[2:]] = float(argv[i + 1])
            args.remove(argv[i + 1])
    c1, o1, c2, o2 = args[:4]
    s1, i1 = parse(c1, o1)
    s2, i2 = parse(c2, o2)
    for section, size_key, size in (("train", "tgt_tokens", opts["tokens"]),
                                    ("decode", "sentences", opts["sentences"])):
        if section not in s1 or section not in s2:
            sys.exit(f"gpu_census: no {section} section in the census")
        recs = extrapolate(s1[section], s2[section], i1[section][size_key], i2[section][size_key], size)
        # copy kinds are words: carry them through
        for (kind, n), (_, f) in zip(recs, s1[section]):
            if kind == "copy":
                n["kind_name"] = f["kind"]
        kernels, totals = price(recs)
        extra = 0.0
        if section == "train":
            a1, a2 = i1["train"]["attention_flops"], i2["train"]["attention_flops"]
            t1, t2 = i1["train"][size_key], i2["train"][size_key]
            extra = a1 + (a2 - a1) * (size - t1) / (t2 - t1)
            title = f"training step, base model, {size:.0f} + {size:.0f} tokens, H100 SXM (estimate)"
        else:
            title = f"beam-search step, base model, {size:.0f} sentences x beam 4, H100 SXM (estimate)"
        report(title, kernels, totals, extra, host_ms if section == "train" else None)
    return 0


def counts(path):
    sections, _ = parse(path, "/dev/null")
    for name, recs in sections.items():
        kinds = [k for k, _ in recs]
        misaligned = sum(1 for k, f in recs if k == "gemm" and f.get("aligned") == "0")
        out16 = sum(1 for k, f in recs if k == "gemm" and f.get("out") == "bf16")
        print(f"{name} launches={kinds.count('launch')} gemms={kinds.count('gemm')} out16={out16} misaligned={misaligned} "
              f"syncs={kinds.count('sync')} mallocs={kinds.count('malloc')} frees={kinds.count('free')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
