#!/usr/bin/env python3
"""PyTorch reference for the engine's decoding benchmark (bench/decode.c).

Loads the model and sources written by `bench/decode weights OUT small|base` into
bench/torch_model.py and translates them with the engine's beam search (src/decode.c):
a Marian-style shrinking beam (a sentence keeps beam - finished live hypotheses; every
step the best `width` continuations of its live hypotheses by log-probability are kept,
ties by hypothesis order then id; those ending in EOS are finished and leave the beam),
GNMT length penalty ((5 + length) / 6)^alpha with EOS counted, output tokens <= source
tokens (without EOS) + offset where EOS is forced, and early stop once nbest hypotheses
are finished and the nbest-th beats every live log_prob / lp(longest output + 1).

Decoding is incremental and batched over sentences x beams: the encoder and every decoder
layer's encoder-decoder keys/values run once per batch, each step feeds one token per live
hypothesis through the decoder with per-layer self-attention key/value caches (reordered
by parent hypothesis), and finished sentences leave the batch.

Usage: /usr/bin/python3 bench/reference_decode.py WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS]
prints one line like `bench/decode run` (tokens: output tokens + EOS; seconds: the median).
"""
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "test", "fixtures"))
from make_decode_fixture import insert_finished, read_fixture  # noqa: E402
from torch_model import Transformer, config, positions  # noqa: E402


def load(path):
    """The model (eval mode) and the records of a weights file in the fixture format."""
    rec = read_fixture(path)
    V, D, H, DFF, LE, LD = (int(x) for x in rec["config"][:6])
    cfg = config("custom", V)
    cfg.update(d_model=D, num_heads=H, d_ff=DFF, num_encoder_layers=LE, num_decoder_layers=LD, dropout=0.0)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(rec[name].copy()))
    return model, rec


def fuse(*linears):
    """One projection (weight [in, sum of outs] for addmm, bias) from several nn.Linear."""
    weight = torch.cat([lin.weight for lin in linears]).t().contiguous()
    return weight, torch.cat([lin.bias for lin in linears])


class Decoder:
    """Incremental decoding with the parameters of a torch_model.Transformer."""

    def __init__(self, model, max_positions):
        m, cfg = model.model, model.cfg
        self.model, self.d, self.h = model, cfg["d_model"], cfg["num_heads"]
        self.dk = self.d // self.h
        # pre-LayerNorm layers (normalize_before): LN before each sublayer, one more after each stack
        self.pre = cfg.get("normalize_before", False)
        identity = lambda t: t  # noqa: E731
        self.enc_ln = getattr(m.encoder, "layer_norm", identity)
        self.dec_ln = getattr(m.decoder, "layer_norm", identity)
        # a sublayer's LayerNorm before it (pre-norm) or after the residual (post-norm)
        self.pre_ln = (lambda ln: ln) if self.pre else (lambda ln: identity)  # noqa: E731
        self.post_ln = (lambda ln: identity) if self.pre else (lambda ln: ln)  # noqa: E731
        self.emb, self.pe = m.shared.weight, positions(max_positions, self.d)
        self.layers = []
        for layer in m.decoder.layers:
            sa, ca = layer.self_attn, layer.encoder_attn
            self.layers.append(dict(layer=layer, qkv=fuse(sa.q_proj, sa.k_proj, sa.v_proj),
                                    kv=fuse(ca.k_proj, ca.v_proj)))

    def heads(self, x):
        """[rows, n, k d_k] -> [rows, k heads, n, d_k]."""
        return x.view(x.shape[0], x.shape[1], -1, self.dk).transpose(1, 2)

    def start(self, src, pad_id):
        """Encodes src [S, Ls]; keeps each layer's cross keys/values [S, H, Ls, d_k] and the padding bias."""
        pad = src == pad_id
        x = self.emb[src] * math.sqrt(self.d) + self.pe[:src.shape[1]]
        for layer in self.model.model.encoder.layers:
            x = layer(x, pad, False)
        x = self.enc_ln(x)
        kv = [self.heads(torch.addmm(L["kv"][1], x.reshape(-1, self.d), L["kv"][0]).view(*x.shape[:2], -1))
              for L in self.layers]
        self.mem = [(m[:, :self.h].contiguous(), m[:, self.h:].contiguous()) for m in kv]
        self.mem_bias = torch.zeros(pad.shape).masked_fill(pad, float("-inf"))[:, None, None, :]
        # self-attention caches: keys transposed [R, H, d_k, t], values [R, H, t, d_k]
        R = src.shape[0]
        self.cache = [(self.emb.new_empty(R, self.h, self.dk, 0), self.emb.new_empty(R, self.h, 0, self.dk))
                      for _ in self.layers]

    def keep_sentences(self, keep):
        """Drops the sentences not in keep (indices into the current ones)."""
        self.mem = [(k[keep], v[keep]) for k, v in self.mem]
        self.mem_bias = self.mem_bias[keep]

    def step(self, tokens, t, parent, sent, slot, beam):
        """Logits [R, V] after feeding tokens at position t; row r continues cache row parent[r] and
        is hypothesis slot[r] of sentence sent[r] (rows grouped by sentence)."""
        R, d, S = tokens.shape[0], self.d, self.mem_bias.shape[0]
        scale = 1.0 / math.sqrt(self.dk)
        x = self.emb[tokens] * math.sqrt(d) + self.pe[t]
        padded = sent * beam + slot  # the rows' places in [S, beam] for the cross-attention
        for i, (L, (Kt, V), (mk, mv)) in enumerate(zip(self.layers, self.cache, self.mem)):
            layer = L["layer"]
            # post-norm: x = LN(x + F(x)); pre-norm: x = x + F(LN(x))
            pre_ln, post_ln = self.pre_ln, self.post_ln
            # masked self-attention: the caches reordered by parent, plus position t; one query
            # per row, so broadcast products and sums (batched matrix-vector products; bmm is
            # 2-4x slower here)
            h = pre_ln(layer.self_attn_layer_norm)(x)
            q, k, v = self.heads(torch.addmm(L["qkv"][1], h, L["qkv"][0])[:, None]).split(self.h, dim=1)
            Kt = torch.cat([Kt[parent], k.transpose(-1, -2)], -1)
            V = torch.cat([V[parent], v], 2)
            self.cache[i] = (Kt, V)
            p = torch.softmax((q.transpose(-1, -2) * scale * Kt).sum(-2, keepdim=True), -1)  # [R, H, 1, t+1]
            a = (p.transpose(-1, -2) * V).sum(-2)  # [R, H, d_k]
            x = post_ln(layer.self_attn_layer_norm)(x + layer.self_attn.out_proj(a.reshape(R, d)))
            # encoder-decoder attention: each sentence's hypotheses (zeros in empty slots) against its source
            qc = x.new_zeros(S * beam, d)
            qc[padded] = layer.encoder_attn.q_proj(pre_ln(layer.encoder_attn_layer_norm)(x))
            qc = qc.view(S, beam, self.h, self.dk).transpose(1, 2)
            a = torch.softmax(qc @ mk.transpose(-1, -2) * scale + self.mem_bias, -1) @ mv
            a = a.transpose(1, 2).reshape(S * beam, d)[padded]
            x = post_ln(layer.encoder_attn_layer_norm)(x + layer.encoder_attn.out_proj(a))
            h = pre_ln(layer.final_layer_norm)(x)
            x = post_ln(layer.final_layer_norm)(x + layer.fc2(torch.relu(layer.fc1(h))))
        return self.dec_ln(x) @ self.emb.t()


def translate(dec, src, beam, offset, alpha=0.6, nbest=1, max_positions=1024, pad=0, bos=2, eos=3):
    """Beam search over src [B, Ls] (ids + EOS, padded); per sentence its nbest finished
    hypotheses, best first, as (score, tokens, log_prob, ended_by_eos)."""
    B = src.shape[0]
    lengths = (src != pad).sum(1)
    src = src[:, :int(lengths.max())]
    dec.start(src, pad)
    lp = lambda n: ((5.0 + n) / 6.0) ** alpha  # noqa: E731
    finished = [[] for _ in range(B)]
    # per live sentence
    ids = torch.arange(B)  # the sentence's index in src
    max_len = (lengths - 1 + offset).clamp(max=max_positions - 1)
    width = torch.full((B,), beam)
    bar = torch.full((B,), -math.inf, dtype=torch.float64)  # nbest-th finished score
    # per live row (hypothesis)
    sent, slot, parent = torch.arange(B), torch.zeros(B, dtype=torch.long), torch.arange(B)
    tokens, logp = torch.full((B,), bos), torch.zeros(B, dtype=torch.float64)
    hist = torch.zeros(B, 0, dtype=torch.long)

    def finish(s, tokens, log_prob, ended):
        insert_finished(finished[s], (log_prob / lp(len(tokens) + 1), tokens, log_prob, ended))

    t = 0
    while True:
        logits = dec.step(tokens, t, parent, sent, slot, beam)
        lse = torch.logsumexp(logits, -1, keepdim=True)
        top, tid = logits.topk(beam, -1)
        tid, order = tid.sort(-1)  # equal logits: smaller id first (with the stable sort below)
        top = (top.gather(1, order) - lse).double() + logp[:, None]
        S = ids.shape[0]
        at_limit = max_len == t  # EOS forced: every live hypothesis finishes
        if at_limit.any():
            eos_logp = (logits[:, eos:eos + 1] - lse).double()[:, 0] + logp
            for r in at_limit[sent].nonzero()[:, 0].tolist():
                finish(int(ids[sent[r]]), hist[r].tolist(), float(eos_logp[r]), False)
        # each sentence's candidates [S, beam rows x beam ids], best first, ties by row then id
        cand = torch.full((S, beam, beam), -math.inf, dtype=torch.float64)
        cand[sent, slot] = top
        val, idx = cand.view(S, -1).sort(dim=-1, descending=True, stable=True)
        val, idx = val[:, :beam], idx[:, :beam]
        row_of = torch.zeros(S, beam, dtype=torch.long)
        row_of[sent, slot] = torch.arange(sent.shape[0])
        row = row_of.gather(1, idx // beam)
        tok = tid[row, idx % beam]
        chosen = (torch.arange(beam) < width[:, None]) & ~at_limit[:, None]
        ended = chosen & (tok == eos)
        if ended.any():
            for s, k in ended.nonzero().tolist():
                finish(int(ids[s]), hist[row[s, k]].tolist(), float(val[s, k]), True)
            width = width - ended.sum(1)
            for s in ended.any(1).nonzero()[:, 0].tolist():
                lst = finished[int(ids[s])]
                bar[s] = lst[nbest - 1][0] if len(lst) >= nbest else -math.inf
        cont = chosen & (tok != eos)
        best_live = torch.where(cont, val, torch.tensor(-math.inf, dtype=torch.float64)).max(1).values
        done = ~cont.any(1) | (bar >= best_live / lp(max_len.double() + 1))
        live = cont & ~done[:, None]
        if not live.any():
            break
        if done.any():  # finished sentences leave the batch
            keep = (~done).nonzero()[:, 0]
            remap = torch.cumsum(~done, 0) - 1
            ids, max_len, width, bar = ids[keep], max_len[keep], width[keep], bar[keep]
            dec.keep_sentences(keep)
        else:
            remap = torch.arange(S)
        s_idx, k_idx = live.nonzero().unbind(1)  # sentence-major, best first
        parent, tokens, logp = row[s_idx, k_idx], tok[s_idx, k_idx], val[s_idx, k_idx]
        slot = (live.cumsum(1) - 1)[s_idx, k_idx]
        sent = remap[s_idx]
        hist = torch.cat([hist[parent], tokens[:, None]], 1)
        t += 1
    return [lst[:nbest] for lst in finished]


def main():
    if len(sys.argv) < 6:
        sys.exit("usage: reference_decode.py WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS]")
    path, threads, beam, batch, offset = sys.argv[1], *(int(a) for a in sys.argv[2:6])
    reps = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    torch.set_num_threads(threads)
    model, rec = load(path)
    cfg = [int(x) for x in rec["config"]]
    sources = torch.from_numpy(rec["sources"].astype("int64"))
    dec = Decoder(model, cfg[9])
    times = []
    with torch.inference_mode():
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            out = []
            for i in range(0, sources.shape[0], batch):
                out += translate(dec, sources[i:i + batch], beam, offset, max_positions=cfg[9],
                                 pad=cfg[6], bos=cfg[7], eos=cfg[8])
            times.append(time.perf_counter() - t0)
    seconds = sorted(times[1:])[reps // 2]  # the median (the upper one for even REPS, as bench/decode)
    tokens = sum(len(h[0][1]) + 1 for h in out)
    n = len(out)
    print(f"pytorch decode d_model={cfg[1]} beam={beam} batch={batch} threads={threads} sentences={n} "
          f"tokens={tokens} seconds={seconds:.3f} tokens_per_s={tokens / seconds:.0f} "
          f"sentences_per_s={n / seconds:.1f}")
    if len(sys.argv) > 7:
        with open(sys.argv[7], "w") as f:
            f.writelines(" ".join(map(str, h[0][1])) + "\n" for h in out)


if __name__ == "__main__":
    main()
