"""The engine's Transformer in PyTorch, written from the paper with the engine's exact
conventions and Hugging Face MarianMT parameter names: the shared embedding scaled by
sqrt(d_model) plus interleaved sinusoidal positions, post-norm encoder and decoder
layers, padding and causal masks, logits through the shared embedding, and PyTorch's
label-smoothed cross-entropy ignoring padding. Configuration keys beyond the presets':
"normalize_before" (pre-norm layers and a final LayerNorm per stack, fairseq's and M2M-100's),
"scale_embedding" (false: no sqrt(d_model)) and "positions" ("fairseq": M2M-100's sinusoids).

Used by test/fixtures/make_model_fixture.py (the reference state the C tests compare
against) and bench/reference_train_step.py (the throughput reference).

With BF16_RULES set (make_bf16_fixture.py), the engine's bf16 mixed precision applied
explicitly: every matrix product takes its operands rounded to bfloat16
(round-to-nearest-even) and accumulates in fp32: those of the projections and the logits,
and inside attention Q K^T and P~ V, where P~ is exp(S - the row's max) rounded so (dropped
out), and the product is divided by the row's sum of exp(S - max) last; everything else
(softmax statistics, LayerNorm, the loss) stays fp32.

With INT8_RULES set (make_int8_fixture.py), the engine's int8 models (src/quantize.c,
src/cpu_matmul.c) applied explicitly: every projection's weight and the shared embedding
(for the lookup and the logits) are quantized per output row, s = max|row| / 127, q =
round(w / s) to nearest even; every product quantizes its input per row the same way
(q = round(x * (127 / max|x|)), the factor in float32) and sums q_x q_w exactly, scaled by
s_x s_w, plus the bias; everything else stays fp32. INT8_WEIGHT_MAX = 63 applies the
rounding of weights to 7 bits that the engine does on CPUs without VNNI (q' = round(q * 63 /
127), s' = s * 127 / 63).
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


BF16_RULES = False
INT8_RULES = False
INT8_WEIGHT_MAX = 127
SDPA = False  # attention through F.scaled_dot_product_attention (PyTorch >= 2.0; bench/reference_train_step.py bf16)


def rounded(t):
    """t rounded to bfloat16 and back, under BF16_RULES; t itself otherwise."""
    return t.to(torch.bfloat16).to(torch.float32) if BF16_RULES else t


def quantized_rows(w):
    """(q, s): w [rows, n] quantized per row, w ~ s[:, None] * q (INT8_RULES)."""
    amax = w.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    return torch.round(w * inv), amax / 127.0


def quantized_weight(w):
    """(q, s) of a weight [out, in] per row, fitted to INT8_WEIGHT_MAX as the engine loads it."""
    q, s = quantized_rows(w)
    if INT8_WEIGHT_MAX < 127:
        q = torch.round(q * (INT8_WEIGHT_MAX / 127.0))
        s = s * (127.0 / INT8_WEIGHT_MAX)
    return q, s


def int8_product(x, w, bias):
    """x [..., in] w^T [in, out] (+ bias) under INT8_RULES, in float64 (exact integer sums)."""
    qx, sx = quantized_rows(x)
    qw, sw = quantized_weight(w)
    y = (qx.double() @ qw.double().t()) * sx.double() * sw.double().t()
    return (y + bias.double() if bias is not None else y).float()


def embedding_weight(e):
    """The shared embedding as the products and the lookup see it (dequantized under INT8_RULES)."""
    if not INT8_RULES:
        return e
    q, s = quantized_weight(e)
    return q * s


class Linear(nn.Linear):
    """nn.Linear whose product follows BF16_RULES or INT8_RULES (same parameters, same names)."""

    def forward(self, x):
        if INT8_RULES:
            return int8_product(x, self.weight, self.bias)
        return F.linear(rounded(x), rounded(self.weight), self.bias)


def positions(length, d, kind="paper", first=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), float64 then float32; or
    kind "fairseq" (M2M-100's): sines then cosines of (pos + first) * exp(-i ln 10000 / (d/2 - 1)),
    computed in float32 as transformers' M2M100SinusoidalPositionalEmbedding does."""
    if kind == "fairseq":
        half = d // 2
        freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
        angle = torch.arange(first, first + length, dtype=torch.int64).float()[:, None] * freq[None, :]
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    pos = np.arange(length, dtype=np.float64)[:, None]
    j = np.arange(d)
    angle = pos / 10000.0 ** ((j - j % 2) / d)
    pe = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return torch.tensor(pe.astype(np.float32))


class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (Linear(d, d) for _ in range(4))

    def forward(self, x, mem, key_pad, causal):
        b, lq, lk, d = x.shape[0], x.shape[1], mem.shape[1], x.shape[2]
        h, dk = self.heads, d // self.heads
        q = rounded(self.q_proj(x)).view(b, lq, h, dk).transpose(1, 2)
        k = rounded(self.k_proj(mem)).view(b, lk, h, dk).transpose(1, 2)
        v = rounded(self.v_proj(mem)).view(b, lk, h, dk).transpose(1, 2)
        mask = key_pad[:, None, None, :].expand(b, h, lq, lk)
        if causal:
            mask = mask | torch.triu(torch.ones(lq, lk, dtype=torch.bool, device=x.device), 1)
        if SDPA:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask,
                                                 dropout_p=self.dropout if self.training else 0.0)
            return self.out_proj(ctx.transpose(1, 2).reshape(b, lq, d))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
        if BF16_RULES:  # P~ = bf16(exp(S - row max)) times V, divided by the row's sum last
            scores = scores.masked_fill(mask, float("-inf"))
            e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
            total = e.sum(dim=-1, keepdim=True)
            self.probs = (e / total).detach()
            ctx = (rounded(F.dropout(e, self.dropout, self.training)) @ v) / total
            return self.out_proj(ctx.transpose(1, 2).reshape(b, lq, d))
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        self.probs = probs.detach()  # [batch, heads, queries, keys], for attention inspection
        probs = F.dropout(probs, self.dropout, self.training)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(b, lq, d))


class Layer(nn.Module):
    def __init__(self, cfg, decoder):
        super().__init__()
        d, eps = cfg["d_model"], cfg["layer_norm_eps"]
        self.dropout, self.relu_dropout = cfg["dropout"], cfg["relu_dropout"]
        self.self_attn = Attention(d, cfg["num_heads"], cfg["attention_dropout"])
        self.self_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        if decoder:
            self.encoder_attn = Attention(d, cfg["num_heads"], cfg["attention_dropout"])
            self.encoder_attn_layer_norm = nn.LayerNorm(d, eps=eps)
        self.fc1 = Linear(d, cfg["d_ff"])
        self.fc2 = Linear(cfg["d_ff"], d)
        self.final_layer_norm = nn.LayerNorm(d, eps=eps)
        self.pre = cfg.get("normalize_before", False)

    def forward(self, x, self_pad, causal, mem=None, mem_pad=None):
        drop = lambda t: F.dropout(t, self.dropout, self.training)  # noqa: E731
        if self.pre:  # x + Drop(F(LN(x))) (fairseq's normalize_before)
            h = self.self_attn_layer_norm(x)
            x = x + drop(self.self_attn(h, h, self_pad, causal))
            if mem is not None:
                x = x + drop(self.encoder_attn(self.encoder_attn_layer_norm(x), mem, mem_pad, False))
            hidden = F.dropout(torch.relu(self.fc1(self.final_layer_norm(x))), self.relu_dropout, self.training)
            return x + drop(self.fc2(hidden))
        x = self.self_attn_layer_norm(x + drop(self.self_attn(x, x, self_pad, causal)))
        if mem is not None:
            x = self.encoder_attn_layer_norm(x + drop(self.encoder_attn(x, mem, mem_pad, False)))
        hidden = F.dropout(torch.relu(self.fc1(x)), self.relu_dropout, self.training)
        return self.final_layer_norm(x + drop(self.fc2(hidden)))


class Stack(nn.Module):
    def __init__(self, cfg, n, decoder):
        super().__init__()
        self.layers = nn.ModuleList(Layer(cfg, decoder) for _ in range(n))
        if cfg.get("normalize_before", False):
            self.layer_norm = nn.LayerNorm(cfg["d_model"], eps=cfg["layer_norm_eps"])

    def forward(self, x, pad, causal, mem=None, mem_pad=None):
        for layer in self.layers:
            x = layer(x, pad, causal, mem, mem_pad)
        return self.layer_norm(x) if hasattr(self, "layer_norm") else x


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.shared = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.encoder = Stack(cfg, cfg["num_encoder_layers"], False)
        self.decoder = Stack(cfg, cfg["num_decoder_layers"], True)


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)

    def forward(self, src, tgt_in, labels):
        m, cfg, d = self.model, self.cfg, self.cfg["d_model"]
        pad = cfg["pad_id"]
        src_pad, tgt_pad = src == pad, tgt_in == pad
        emb = embedding_weight(m.shared.weight)
        scale = math.sqrt(d) if cfg.get("scale_embedding", True) else 1.0
        kind, first = cfg.get("positions", "paper"), pad + 1
        x = F.embedding(src, emb) * scale + positions(src.shape[1], d, kind, first).to(src.device)
        x = m.encoder(F.dropout(x, cfg["dropout"], self.training), src_pad, False)
        y = F.embedding(tgt_in, emb) * scale + positions(tgt_in.shape[1], d, kind, first).to(tgt_in.device)
        y = m.decoder(F.dropout(y, cfg["dropout"], self.training), tgt_pad, True, x, src_pad)
        if INT8_RULES:
            logits = int8_product(y, m.shared.weight, None).reshape(-1, cfg["vocab_size"])
        else:
            logits = (rounded(y) @ rounded(m.shared.weight).t()).reshape(-1, cfg["vocab_size"])
        loss = F.cross_entropy(logits, labels.reshape(-1), ignore_index=pad,
                               label_smoothing=cfg["label_smoothing"], reduction="sum")
        return logits, loss, int((labels != pad).sum())


def config(size, vocab_size):
    """The engine's presets (src/config.c)."""
    layers, d, heads, dff = {"small": (3, 256, 4, 1024), "base": (6, 512, 8, 2048)}.get(size, (2, 32, 4, 64))
    return {"num_encoder_layers": layers, "num_decoder_layers": layers, "d_model": d, "num_heads": heads,
            "d_ff": dff, "dropout": 0.1, "attention_dropout": 0.0, "relu_dropout": 0.0,
            "label_smoothing": 0.1, "vocab_size": vocab_size, "layer_norm_eps": 1e-5, "pad_id": 0}
