#!/usr/bin/env python3
"""PyTorch reference for the demo's training run (bench/run_reference drives it).

Trains bench/torch_model.py's Transformer (the engine's exact architecture) on the same
SentencePiece ids the database produced (exported by bench/run_reference), cut into the
same batches in the same order as the training worker (bgworker/data.c: pairs longer than
max_positions dropped, sorted by source then target length, cut while (longest + 1) x count
stays within batch_tokens on both sides; each epoch visits the batches in the order of a
Fisher-Yates shuffle drawn from the engine's Philox generator with (seed, epoch)), from the
job's own initial parameters (DATA_DIR/initial.safetensors, exported from the database:
attention.initialize_checkpoint with the job's seed draws exactly the worker's starting
point), or without that file the same initialisation scheme drawn by PyTorch's generator
(Xavier-uniform projections, zero biases, LayerNorm 1/0, embeddings N(0, d^-0.5)); with
Adam (0.9, 0.98, 1e-9) and the paper's learning-rate schedule, in the precision the job
ran (its options' "precision": bf16 trains under torch.autocast(bfloat16), PyTorch's CPU
mixed precision; fp32 without), for the same wall-clock budget of training. Then it measures the validation cross-entropy
and translates the test sources with the engine's beam search rules
(bench/reference_decode.py: beam 4, alpha 0.6, offset 50, batches of 32 in length order).

Usage: /usr/bin/python3 bench/reference_train.py DATA_DIR MINUTES THREADS OUT_DIR [AT_STEP]
DATA_DIR: setup.json (model config and job options) and {train,valid,test}.ids (one pair
per line: source ids TAB target ids). Writes OUT_DIR/test.hyp.ids (one line of output ids
per test pair, in file order) and prints a summary line. With AT_STEP, the same evaluation
also runs once training reaches that step (OUT_DIR/test.hyp.AT_STEP.ids, its own summary
line), outside the training clock, for the equal-steps comparison.
"""
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_decode import Decoder, translate  # noqa: E402
import torch_model  # noqa: E402
from torch_model import Transformer  # noqa: E402

M32 = 0xFFFFFFFF


def philox(c, k):
    """Philox4x32-10 of counter c[4] under key k[2] (src/rng.h)."""
    c0, c1, c2, c3 = c
    k0, k1 = k
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def random_u32(seed, stream, index):
    """tf_random_u32 (src/rng.c)."""
    block = index >> 2
    out = philox((block & M32, block >> 32, stream & M32, stream >> 32), (seed & M32, seed >> 32))
    return out[index & 3]


def epoch_order(num_batches, seed, epoch):
    """data_epoch_order (bgworker/data.c)."""
    order = list(range(num_batches))
    stream = (0x5EED << 48) | epoch
    for i in range(num_batches - 1, 0, -1):
        j = (random_u32(seed, stream, i) * (i + 1)) >> 32
        order[i], order[j] = order[j], order[i]
    return order


def read_pairs(path):
    pairs = []
    with open(path) as f:
        for line in f:
            s, t = line.rstrip("\n").split("\t")
            pairs.append(([int(x) for x in s.split()], [int(x) for x in t.split()]))
    return pairs


def make_batches(pairs, max_positions, batch_tokens):
    """data_load's sorting and cutting (bgworker/data.c)."""
    kept = [p for p in pairs if len(p[0]) + 1 <= max_positions and len(p[1]) + 1 <= max_positions]
    kept.sort(key=lambda p: (len(p[0]), len(p[1])))  # stable: corpus order within a length
    batches, i = [], 0
    while i < len(kept):
        s = t = 0
        j = i
        while j < len(kept):
            s2, t2 = max(s, len(kept[j][0]) + 1), max(t, len(kept[j][1]) + 1)
            if j > i and (s2 * (j - i + 1) > batch_tokens or t2 * (j - i + 1) > batch_tokens):
                break
            s, t, j = s2, t2, j + 1
        batches.append(kept[i:j])
        i = j
    return batches


def tensors(batch, pad, bos, eos):
    """Padded src (ids + EOS), tgt_in (BOS + ids) and labels (ids + EOS)."""
    S = max(len(s) for s, _ in batch) + 1
    T = max(len(t) for _, t in batch) + 1
    src = torch.full((len(batch), S), pad, dtype=torch.long)
    tgt = torch.full((len(batch), T), pad, dtype=torch.long)
    lab = torch.full((len(batch), T), pad, dtype=torch.long)
    for k, (s, t) in enumerate(batch):
        src[k, :len(s) + 1] = torch.tensor(s + [eos])
        tgt[k, :len(t) + 1] = torch.tensor([bos] + t)
        lab[k, :len(t) + 1] = torch.tensor(t + [eos])
    return src, tgt, lab


def initialise(model, d_model):
    """The engine's scheme (src/model.c); PyTorch's generator, so not the same numbers."""
    for name, p in model.named_parameters():
        if name == "model.shared.weight":
            torch.nn.init.normal_(p, 0.0, d_model ** -0.5)
        elif "layer_norm" in name:
            torch.nn.init.ones_(p) if name.endswith("weight") else torch.nn.init.zeros_(p)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)
        else:
            torch.nn.init.xavier_uniform_(p)


def load_safetensors(path):
    """The F32 tensors of a safetensors file (8-byte header length, JSON header, data)."""
    raw = open(path, "rb").read()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        begin, end = t["data_offsets"]
        data = bytearray(raw[8 + size + begin:8 + size + end])
        out[name] = torch.frombuffer(data, dtype=torch.float32).reshape(t["shape"])
    return out


def check_decoder(model, dec, batch, pad, bos, eos):
    """Exits unless the incremental decoder's logits, fed the targets of batch one token at a
    time, equal the model's full forward's (to 1e-3): the beam search reads the same model."""
    src, tgt, lab = tensors(batch, pad, bos, eos)
    full = model(src, tgt, lab)[0].view(tgt.shape[0], tgt.shape[1], -1)
    rows = torch.arange(src.shape[0])
    dec.start(src, pad)
    worst = 0.0
    for t in range(tgt.shape[1]):
        step = dec.step(tgt[:, t], t, rows, rows, torch.zeros_like(rows), 1)
        live = tgt[:, t] != pad
        worst = max(worst, float((step[live] - full[live, t]).abs().max()))
    if worst > 1e-3:
        sys.exit(f"reference_train.py: the incremental decoder differs from the model's forward by {worst:.3g}")
    return worst


def evaluate(model, cfg, data, out, hyp_name):
    """Writes beam-4 translations of the test sources to OUT_DIR/hyp_name; returns the
    validation cross-entropy and the decoding seconds. Leaves the model in train mode."""
    pad, bos, eos = cfg["pad_id"], cfg["bos_id"], cfg["eos_id"]
    model.eval()
    with torch.inference_mode():
        nll = count = 0
        for batch in make_batches(read_pairs(os.path.join(data, "valid.ids")), cfg["max_positions"], 4096):
            src, tgt, lab = tensors(batch, pad, bos, eos)
            logits, _, n = model(src, tgt, lab)
            nll += float(torch.nn.functional.cross_entropy(logits, lab.reshape(-1), ignore_index=pad, reduction="sum"))
            count += n
        test = read_pairs(os.path.join(data, "test.ids"))
        by_length = sorted(range(len(test)), key=lambda i: len(test[i][0]))
        dec = Decoder(model, cfg["max_positions"])
        worst = check_decoder(model, dec, test[:8], pad, bos, eos)
        print(f"incremental decoder against the full forward on 8 test pairs: {worst:.2g}", flush=True)
        hyps = [None] * len(test)
        t0 = time.perf_counter()
        for b in range(0, len(by_length), 32):
            idx = by_length[b:b + 32]
            L = max(len(test[i][0]) for i in idx) + 1
            src = torch.full((len(idx), L), pad, dtype=torch.long)
            for k, i in enumerate(idx):
                src[k, :len(test[i][0]) + 1] = torch.tensor(test[i][0][:cfg["max_positions"] - 1] + [eos])
            for i, h in zip(idx, translate(dec, src, 4, 50, 0.6, 1, cfg["max_positions"], pad, bos, eos)):
                hyps[i] = h[0][1]
        decode_seconds = time.perf_counter() - t0
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, hyp_name), "w") as f:
        f.writelines(" ".join(map(str, h)) + "\n" for h in hyps)
    model.train()
    return nll / count, decode_seconds


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit("usage: reference_train.py DATA_DIR MINUTES THREADS OUT_DIR [AT_STEP]")
    data, minutes, threads, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    at_step = int(sys.argv[5]) if len(sys.argv) == 6 else 0
    torch.set_num_threads(threads)
    setup = json.load(open(os.path.join(data, "setup.json")))
    cfg, opt = setup["config"], setup["options"]
    pad, bos, eos = setup["pad_id"], setup["bos_id"], setup["eos_id"]
    cfg["pad_id"], cfg["bos_id"], cfg["eos_id"] = pad, bos, eos
    if opt.get("dropout") is not None:
        cfg["dropout"] = opt["dropout"]
    if opt.get("label_smoothing") is not None:
        cfg["label_smoothing"] = opt["label_smoothing"]
    precision = opt.get("precision", "fp32")  # the job row holds what "auto" resolved to
    if precision not in ("fp32", "bf16"):
        sys.exit(f"reference_train.py: the job's precision is {precision!r}, not fp32 or bf16")
    # fused attention where this PyTorch has it (2.0 on); 1.13 (Debian 12's) runs the explicit softmax under autocast
    torch_model.SDPA = precision == "bf16" and hasattr(torch.nn.functional, "scaled_dot_product_attention")
    autocast = torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    seed = int(opt["seed"])
    torch.manual_seed(seed)
    model = Transformer(cfg)
    initial = os.path.join(data, "initial.safetensors")
    if os.path.exists(initial):
        model.load_state_dict(load_safetensors(initial), strict=True)
        print(f"initial parameters: {initial}", flush=True)
    else:
        initialise(model, cfg["d_model"])
    batches = make_batches(read_pairs(os.path.join(data, "train.ids")), cfg["max_positions"], opt["batch_tokens"])
    adam = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    warmup, scale = opt["warmup_steps"], opt["learning_rate_scale"]

    model.train()
    budget, trained, tokens, step, epoch, position = minutes * 60, 0.0, 0, 0, 0, 0
    order = epoch_order(len(batches), seed, epoch)
    loss_sum = loss_tokens = 0
    while trained < budget:
        t0 = time.perf_counter()
        src, tgt, lab = tensors(batches[order[position]], pad, bos, eos)
        position += 1
        if position == len(batches):
            epoch, position = epoch + 1, 0
            order = epoch_order(len(batches), seed, epoch)
        adam.zero_grad()
        with autocast:
            _, loss, n = model(src, tgt, lab)
        (loss / n).backward()
        step += 1
        for group in adam.param_groups:
            group["lr"] = scale * cfg["d_model"] ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        adam.step()
        trained += time.perf_counter() - t0
        tokens += int((src != pad).sum()) + n
        loss_sum, loss_tokens = loss_sum + float(loss), loss_tokens + n
        if step % 50 == 0:
            print(f"step {step} epoch {epoch} loss {loss_sum / loss_tokens:.3f} {tokens / trained:.0f} tok/s "
                  f"{trained / 60:.1f} min", flush=True)
            loss_sum = loss_tokens = 0
        if step == at_step:
            valid_loss, _ = evaluate(model, cfg, data, out, f"test.hyp.{step}.ids")
            print(f"pytorch at_step={step} minutes={trained / 60:.1f} valid_loss={valid_loss:.4f}",
                  flush=True)

    os.makedirs(out, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(out, "model.pt"))  # to decode again without training
    valid_loss, decode_seconds = evaluate(model, cfg, data, out, "test.hyp.ids")
    print(f"pytorch steps={step} epochs={epoch + position / len(batches):.2f} minutes={trained / 60:.1f} "
          f"tokens_per_s={tokens / trained:.0f} valid_loss={valid_loss:.4f} "
          f"decode_s={decode_seconds:.0f} precision={precision} torch={torch.__version__}", flush=True)


if __name__ == "__main__":
    main()
