"""bench/m2m100_size.py: the files of bench/m2m100_size (numpy only, no torch).

write DIR FIXTURE: a random M2M100ForConditionalGeneration shaped like facebook/m2m100_418M
(config.json, model.safetensors written tensor by tensor, N(0, 0.02) float32 from a fixed
seed, transformers' names and shapes), with the SentencePiece model and tokenizer_config.json
of the test fixture FIXTURE and a vocab.json of 128,004 pieces (4 specials and made-up
pieces), so that 128,004 + 100 languages + 8 made-up words = vocab_size 128,112.

compare A B: every tensor of safetensors files A and B (names, dtypes, shapes, bytes),
read in 64 MB pieces; exits non-zero on any difference.
"""
import hashlib
import json
import os
import shutil
import struct
import sys

import numpy as np

D, LAYERS, HEADS, FFN, VOCAB, POSITIONS = 1024, 12, 16, 4096, 128112, 1024


def shapes():
    out = {"model.shared.weight": (VOCAB, D)}
    for stack in ("encoder", "decoder"):
        out[f"model.{stack}.layer_norm.weight"] = (D,)
        out[f"model.{stack}.layer_norm.bias"] = (D,)
        for i in range(LAYERS):
            p = f"model.{stack}.layers.{i}."
            blocks = ["self_attn"] + (["encoder_attn"] if stack == "decoder" else [])
            for b in blocks:
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    out[f"{p}{b}.{proj}.weight"] = (D, D)
                    out[f"{p}{b}.{proj}.bias"] = (D,)
                out[f"{p}{b}_layer_norm.weight"] = (D,)
                out[f"{p}{b}_layer_norm.bias"] = (D,)
            out[p + "fc1.weight"], out[p + "fc1.bias"] = (FFN, D), (FFN,)
            out[p + "fc2.weight"], out[p + "fc2.bias"] = (D, FFN), (D,)
            out[p + "final_layer_norm.weight"], out[p + "final_layer_norm.bias"] = (D,), (D,)
    return dict(sorted(out.items()))


def write(directory, fixture):
    os.makedirs(directory, exist_ok=True)
    config = json.load(open(os.path.join(fixture, "config.json")))
    config.update(d_model=D, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                  decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, vocab_size=VOCAB,
                  max_position_embeddings=POSITIONS, num_hidden_layers=LAYERS, init_std=0.02)
    json.dump(config, open(os.path.join(directory, "config.json"), "w"), indent=2)
    for f in ("sentencepiece.bpe.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(fixture, f), directory)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"\u2581piece{i}": i for i in range(4, VOCAB - 108)})
    json.dump(vocab, open(os.path.join(directory, "vocab.json"), "w"), ensure_ascii=False)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes().items():
        n = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    rng = np.random.default_rng(0)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape in shapes().items():
            if name.endswith("layer_norm.weight"):
                f.write(np.ones(shape, dtype="<f4").tobytes())
            else:
                f.write((rng.standard_normal(shape, dtype=np.float32) * 0.02).astype("<f4").tobytes())
    params = sum(int(np.prod(s)) for s in shapes().values())
    print(f"wrote {directory}: {params / 1e6:.0f}M parameters, {offset / 2**30:.2f} GiB of tensors")


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h, 8 + n


def digest(path, start, entry):
    m = hashlib.sha256()
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(start + begin)
        left = end - begin
        while left > 0:
            chunk = f.read(min(left, 64 << 20))
            m.update(chunk)
            left -= len(chunk)
    return m.hexdigest()


def compare(a, b):
    (ha, sa), (hb, sb) = header(a), header(b)
    if set(ha) != set(hb):
        sys.exit(f"tensor names differ: {sorted(set(ha) ^ set(hb))[:5]}")
    bad = [k for k in ha if ha[k]["dtype"] != hb[k]["dtype"] or ha[k]["shape"] != hb[k]["shape"]
           or digest(a, sa, ha[k]) != digest(b, sb, hb[k])]
    if bad:
        sys.exit(f"{len(bad)} tensors differ, e.g. {bad[:3]}")
    print(f"all {len(ha)} tensors equal bitwise (names, dtypes, shapes, SHA-256 of the bytes)")


if __name__ == "__main__":
    {"write": write, "compare": compare}[sys.argv[1]](*sys.argv[2:])
