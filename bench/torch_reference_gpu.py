#!/usr/bin/env python3
"""Reference timings on a GPU (bench/gpu-suite, part 3): PyTorch's fused attention
(F.scaled_dot_product_attention, forward and forward + backward) and its cuBLASLt matrix
products at the shapes of bench/census_step's base step, to set beside the engine's per-kernel
times. Attention is padded to the mean sentence length, a lower bound for packed sentences.
Needs a CUDA-enabled PyTorch."""
import torch, torch.nn.functional as F, time
torch.manual_seed(0)
dev = 'cuda'
def bench(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ts = []
    for _ in range(n):
        ev[0].record(); fn(); ev[1].record(); torch.cuda.synchronize(); ts.append(ev[0].elapsed_time(ev[1]))
    ts.sort(); return ts[len(ts)//2]
B, L, H, D = 840, 31, 8, 64   # 840 sentences of mean 30 (+EOS) tokens, as census_step; padded to the mean (a lower bound)
for dt in (torch.bfloat16, torch.float32):
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, L, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, L, D, device=dev, dtype=dt)
        f = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        def fb():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal); o.backward(g)
        t = bench(fb)
        print(f"sdpa {str(dt)[6:]:8s} causal={causal!s:5s} B={B} L={L} H={H} d_k={D}: forward {f*1e3:7.1f} us, forward+backward {t*1e3:7.1f} us")
for m, n, k in ((26222, 512, 512), (26222, 2048, 512), (26222, 512, 2048), (25845, 37000, 512)):
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16); w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    for out in (torch.bfloat16, torch.float32):
        o = torch.empty(m, n, device=dev, dtype=out)
        if out == torch.bfloat16:
            fn = lambda: torch.matmul(a, w.t(), out=o)
        else:   # bf16 operands, fp32 output: the engine's cublasGemmEx
            fn = lambda: torch.mm(a, w.t(), out_dtype=torch.float32, out=o)
        try:
            t = bench(fn)
            print(f"gemm tokens={m} out={n} k={k} bf16 in, {str(out)[6:]} out: {t*1e3:8.1f} us, {2*m*n*k/t/1e9:6.1f} TFLOP/s")
        except Exception as e:
            print(f"gemm {m}x{n}x{k} {out}: {type(e).__name__}: {str(e)[:100]}")
print(torch.__version__, torch.cuda.get_device_name())
