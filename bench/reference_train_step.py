#!/usr/bin/env python3
"""PyTorch reference for bench/train_step: the same model (bench/torch_model.py), the
same batches file, the same thread count, full steps (forward, backward, Adam with the
paper's schedule), eager mode. Prints one result line like the engine's.

Usage: reference_train_step.py BATCHES_FILE small|base THREADS STEPS [cpu|cuda] [fp32|tf32|bf16]
On cuda the step time waits for the device (torch.cuda.synchronize); tf32 lets cuBLAS round
matrix-product inputs to TF32 on tensor cores, fp32 forbids it (the engine's fp32 backend);
bf16 is torch.autocast(bfloat16) with attention through F.scaled_dot_product_attention (its
fused kernels; PyTorch 1.13, which lacks it, the model's explicit attention under autocast),
the comparison for the engine's bf16 mixed precision.
"""
import os
import resource
import statistics
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402
from torch_model import Transformer, config  # noqa: E402


def read_batches(path):
    with open(path, "rb") as f:
        data = f.read()
    (count,), off, batches = struct.unpack_from("<i", data), 4, []
    for _ in range(count):
        b, s, t = struct.unpack_from("<3i", data, off)
        off += 12
        arrays = []
        for n in (b * s, b * t, b * t):
            arrays.append(torch.from_numpy(np.frombuffer(data, "<i4", n, off).astype(np.int64)))
            off += 4 * n
        batches.append((arrays[0].view(b, s), arrays[1].view(b, t), arrays[2].view(b, t)))
    return batches


def main():
    path, size, threads, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    precision = sys.argv[6] if len(sys.argv) > 6 else "fp32"
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    # fused attention where this PyTorch has it (2.0 on); 1.13 (Debian 12's) runs the explicit softmax under autocast
    torch_model.SDPA = precision == "bf16" and hasattr(torch.nn.functional, "scaled_dot_product_attention")
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    batches = [tuple(t.to(device) for t in b) for b in read_batches(path)]
    cfg = config(size, 8000)
    model = Transformer(cfg).to(device)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    times, tokens = [], 0
    for i in range(-2, steps):
        src, tgt_in, labels = batches[(i + 2) % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad()
        with autocast:
            _, loss_sum, n = model(src, tgt_in, labels)
        (loss_sum / n).backward()
        step = i + 3
        for group in opt.param_groups:
            group["lr"] = cfg["d_model"] ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
        opt.step()
        sync()
        if i >= 0:
            times.append(time.perf_counter() - t0)
            tokens += int((src != 0).sum()) + n
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"pytorch {size} device={device} precision={precision} threads={threads} steps={steps} median_step_s={statistics.median(times):.4f} "
          f"tokens_per_s={tokens / sum(times):.0f} torch={torch.__version__} max_rss_mb={rss}")


if __name__ == "__main__":
    main()
