#!/usr/bin/env python3
"""ct2_convert.py HF_EXPORT_DIR OUT_DIR: a MarianMT model directory (scripts/export-hf's, or an
OPUS-MT download with model.safetensors) as a CTranslate2 model directory, built with
CTranslate2's spec API (scripts/export-ct2 runs it on a checkpoint's export).

Usage (needs ctranslate2, 4.4.0 checked, and numpy; no torch, transformers or safetensors):

    python3 scripts/ct2_convert.py EXPORT_DIR OUT_DIR

OUT_DIR receives CTranslate2's model.bin, config.json and shared_vocabulary.json, plus the
export's source.spm, target.spm and vocab.json for tokenizing. Translating as this engine:

    sp = sentencepiece.SentencePieceProcessor(model_file=OUT_DIR + "/source.spm")
    src = sp.encode(text, out_type=str) + ["</s>"]       # the model's EOS piece (config.json)
    out = ctranslate2.Translator(OUT_DIR).translate_batch(
        [src], beam_size=1, min_decoding_length=0, max_decoding_length=len(src) - 1 + 50,
        suppress_sequences=[["<pad>"]])[0].hypotheses[0]  # pieces, without EOS
    text = sentencepiece.SentencePieceProcessor(model_file=OUT_DIR + "/target.spm").decode(out)

- The source is source.spm's pieces followed by the EOS piece, fed by the caller
  (add_source_eos is false, as MarianTokenizer's ids and CTranslate2's own Marian models);
  a piece the vocabulary lacks is <unk> in both engines. A multilingual model's leading
  language code (">>deu<<") must be one piece, as MarianTokenizer makes it.
- min_decoding_length=0: this engine may end with EOS at the first step (CTranslate2's
  default is 1); max_decoding_length = source pieces (without EOS) + max_length_offset (50),
  this engine's limit; suppress_sequences: this engine never proposes the pad id (it still
  counts it in its log-softmax, CTranslate2 sets its logit to -FLT_MAX first: the same greedy
  choices; scores are not claimed equal, nor is CTranslate2's score_batch compared).
- Every row of vocab.json is kept, in id order (ct2-transformers-converter drops the last as
  Marian's appended pad; here pad is id 0 for this engine's models); the decoder starts from
  the piece of config's decoder_start_token_id ("<s>" for models trained here, "<pad>" for
  OPUS-MT ones, whose pad embedding is what the engine feeds too).
- Positions: the export's embed_positions tensors when present, otherwise Marian's sinusoid
  table (sin of every frequency, then cos, positions from 0, max_position_embeddings rows,
  float64 then float32) computed here: the export's weights are in Marian's coordinate order
  (the engine's interleaved layout is one permutation of them away, see
  docs/pretrained-models.md). final_logits_bias becomes the projection's bias when non-zero.

Verified (scripts/test-ct2, bench/interop; CTranslate2 4.4.0, float32 on CPU): greedy
pieces equal to attention.translate_nbest(s, model, 1, 1) for the swish fixture imported and
exported, and for a model trained here; by hand also the gelu fixture, a random model of our
own, and the swish fixture's own directory given embed_positions and embedding copies as an
OPUS-MT download has them (the computed table is bitwise transformers' 4.40.2 one).

Limits: post-norm MarianMT with one shared, tied embedding and equal head counts only (what
the engine imports and exports; anything else is refused naming the field); beam search above
1 is not claimed equal (CTranslate2's length penalty and stopping rule differ from this
engine's); only float32 is checked (a compute_type such as int8 at load time gives an
approximation).
"""
import json
import os
import shutil
import sys

import numpy as np
from ctranslate2.specs import common_spec, transformer_spec

ACTIVATIONS = {"relu": common_spec.Activation.RELU, "swish": common_spec.Activation.SWISH,
               "silu": common_spec.Activation.SWISH, "gelu": common_spec.Activation.GELU}
# the names a MarianMT file may give its one (tied) embedding matrix
EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight",
              "model.decoder.embed_tokens.weight", "lm_head.weight")
# MarianMTModel's LayerNorm epsilon (torch.nn.LayerNorm's default; not configurable there)
LAYER_NORM_EPS = 1e-5


def fail(message):
    sys.exit(f"ct2_convert: {message}")


def read_safetensors(path):
    """The tensors of a safetensors file as {name: float32 numpy array} (F32, F16, BF16)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail(f"{path}: not a safetensors file")
    n = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        fail(f"{path}: bad header: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: bad header: not a JSON object")
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            raw = body[begin:end]
            if info["dtype"] == "F32":
                a = np.frombuffer(raw, "<f4")
            elif info["dtype"] == "F16":
                a = np.frombuffer(raw, "<f2").astype(np.float32)
            elif info["dtype"] == "BF16":
                a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                fail(f"{path}: tensor {name} has dtype {info['dtype']} (F32, F16 or BF16 only)")
            tensors[name] = np.ascontiguousarray(a.reshape(info["shape"]), dtype=np.float32)
        except (KeyError, TypeError, ValueError) as e:
            fail(f"{path}: tensor {name}: bad entry {json.dumps(info)[:200]} ({e})")
    return tensors


def marian_positions(length, d):
    """Marian's sinusoid table [length, d]: column c < d/2 is sin(pos / 10000^(2c/d)), column
    d/2 + c its cos; float64, then float32 (the engine's table, permuted)."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    angle = pos / np.power(10000.0, 2.0 * np.arange(d // 2, dtype=np.float64) / d)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


class Weights:
    """The file's tensors, each to be used once (a tensor left over is an error)."""

    def __init__(self, tensors):
        self.tensors, self.used = tensors, set()

    def get(self, name, shape=None):
        if name not in self.tensors:
            fail(f"model.safetensors has no tensor {name}")
        t = self.tensors[name]
        if shape is not None and tuple(t.shape) != tuple(shape):
            fail(f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
        self.used.add(name)
        return t

    def optional(self, name):
        return self.get(name) if name in self.tensors else None


def read_config(path):
    """config.json's values this converter needs, MarianConfig's defaults for absent keys (as
    from_pretrained); anything CTranslate2's TransformerSpec or this converter does not
    build is refused, naming the key."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    c = {k: v for k, v in raw.items() if v is not None}
    if c.get("model_type") != "marian":
        fail(f"{path}: \"model_type\" is {c.get('model_type')!r}, not \"marian\"")
    for key, want in (("normalize_before", False), ("normalize_embedding", False),
                      ("add_final_layer_norm", False), ("share_encoder_decoder_embeddings", True),
                      ("tie_word_embeddings", True)):
        if c.get(key, want) != want:
            fail(f"{path}: \"{key}\" {json.dumps(c[key])} is not supported (only {json.dumps(want)})")
    vocab_size = c.get("vocab_size", 58101)
    if c.get("decoder_vocab_size", vocab_size) != vocab_size:
        fail(f"{path}: \"decoder_vocab_size\" {c['decoder_vocab_size']} differs from \"vocab_size\" {vocab_size}")
    heads = c.get("encoder_attention_heads", 16)
    if c.get("decoder_attention_heads", 16) != heads:
        fail(f"{path}: \"decoder_attention_heads\" differs from \"encoder_attention_heads\" {heads}")
    activation = c.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        fail(f"{path}: \"activation_function\" {activation!r} is not supported ({', '.join(ACTIVATIONS)})")
    d_model = c.get("d_model", 1024)
    if d_model % 2 or d_model % heads:
        fail(f"{path}: \"d_model\" {d_model} must be even and a multiple of the heads {heads}")
    out = {"vocab_size": vocab_size, "d_model": d_model, "heads": heads, "activation": activation,
           "encoder_layers": c.get("encoder_layers", 12), "decoder_layers": c.get("decoder_layers", 12),
           "max_positions": c.get("max_position_embeddings", 1024),
           "scale_embedding": c.get("scale_embedding", False), "pad": c.get("pad_token_id", 58100),
           "eos": c.get("eos_token_id", 0), "start": c.get("decoder_start_token_id", 58100)}
    for key in ("pad", "eos", "start"):
        if not 0 <= out[key] < vocab_size:
            fail(f"{path}: the {key} id {out[key]} is not below \"vocab_size\" {vocab_size}")
    return out


def read_vocabulary(path, vocab_size):
    """vocab.json's pieces in id order: every id below vocab_size exactly once."""
    with open(path, encoding="utf-8") as f:
        vocab = json.load(f)
    tokens = [None] * vocab_size
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < vocab_size:
            fail(f"{path}: piece {piece!r} has id {i!r}, not in [0, {vocab_size})")
        if tokens[i] is not None:
            fail(f"{path}: id {i} is both {tokens[i]!r} and {piece!r}")
        tokens[i] = piece
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        fail(f"{path}: {len(missing)} ids have no piece (the first: {missing[0]})")
    if "<unk>" not in vocab:
        fail(f"{path}: has no \"<unk>\"")
    return tokens


def fill_layers(spec, get):
    """Sets every layer of spec's encoder and decoder (post-norm TransformerSpec) from the
    MarianMT-named tensors get(name) returns: nn.Linear weights [out, in], as CTranslate2's;
    q, k, v fused by rows (k, v for the cross attention); LayerNorm weight and bias. Also used
    by bench/ct2_decode.py."""

    def linear(s, *names):
        s.weight = np.concatenate([get(n + ".weight") for n in names])
        s.bias = np.concatenate([get(n + ".bias") for n in names])

    def norm(s, name):
        s.gamma, s.beta = get(name + ".weight"), get(name + ".bias")

    def attention(s, p, cross):
        q, k, v = (f"{p}.{x}_proj" for x in "qkv")
        if cross:  # queries from the decoder; keys and values from the encoder's output
            linear(s.linear[0], q)
            linear(s.linear[1], k, v)
        else:
            linear(s.linear[0], q, k, v)
        linear(s.linear[-1], p + ".out_proj")

    for stack, name in ((spec.encoder, "encoder"), (spec.decoder, "decoder")):
        for i, layer in enumerate(stack.layer):
            p = f"model.{name}.layers.{i}"
            attention(layer.self_attention, p + ".self_attn", False)
            norm(layer.self_attention.layer_norm, p + ".self_attn_layer_norm")
            if name == "decoder":
                attention(layer.attention, p + ".encoder_attn", True)
                norm(layer.attention.layer_norm, p + ".encoder_attn_layer_norm")
            linear(layer.ffn.linear_0, p + ".fc1")
            linear(layer.ffn.linear_1, p + ".fc2")
            norm(layer.ffn.layer_norm, p + ".final_layer_norm")


def build_spec(cfg, w, tokens):
    """The TransformerSpec of the MarianMT parameters in w."""
    V, d = cfg["vocab_size"], cfg["d_model"]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg["encoder_layers"], cfg["decoder_layers"]), cfg["heads"], pre_norm=False,
        activation=ACTIVATIONS[cfg["activation"]])

    present = [n for n in EMBEDDINGS if n in w.tensors]
    if not present:
        fail(f"model.safetensors has no embedding ({', '.join(EMBEDDINGS)})")
    emb = w.get(present[0], (V, d))
    for n in present[1:]:
        if not np.array_equal(w.get(n, (V, d)), emb):
            fail(f"{n} differs from {present[0]}: separate embeddings are not supported")

    spec.encoder.embeddings[0].weight = emb
    spec.decoder.embeddings.weight = emb
    spec.decoder.projection.weight = emb  # logits = h E^T (+ final_logits_bias)
    bias = w.optional("final_logits_bias")
    if bias is not None:
        if bias.size != V:
            fail(f"final_logits_bias has shape {list(bias.shape)}, expected [1, {V}]")
        if np.any(bias != 0):
            spec.decoder.projection.bias = bias.reshape(V)
    for stack, name in ((spec.encoder, "encoder"), (spec.decoder, "decoder")):
        stack.scale_embeddings = bool(cfg["scale_embedding"])  # x sqrt(d_model)
        table = w.optional(f"model.{name}.embed_positions.weight")
        if table is None:
            table = marian_positions(cfg["max_positions"], d)
        elif table.ndim != 2 or table.shape[1] != d:
            fail(f"model.{name}.embed_positions.weight has shape {list(table.shape)}, expected [N, {d}]")
        stack.position_encodings.encodings = table  # row 0 is position 0
    fill_layers(spec, w.get)
    left = sorted(set(w.tensors) - w.used)
    if left:
        fail(f"model.safetensors has {len(left)} tensors this converter does not place (the first: {left[0]})")

    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.unk_token = "<unk>"
    spec.config.eos_token = tokens[cfg["eos"]]
    spec.config.decoder_start_token = tokens[cfg["start"]]
    # BOS is never fed (add_source_bos false); "<s>" where the vocabulary has it, else the start
    spec.config.bos_token = "<s>" if "<s>" in tokens else tokens[cfg["start"]]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False  # the caller appends the EOS piece
    return spec


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: ct2_convert.py HF_EXPORT_DIR OUT_DIR")
    src, out = argv[1], argv[2]
    for f in ("config.json", "model.safetensors", "vocab.json", "source.spm", "target.spm"):
        if not os.path.isfile(os.path.join(src, f)):
            fail(f"{src}/{f} is missing")
    cfg = read_config(os.path.join(src, "config.json"))
    tokens = read_vocabulary(os.path.join(src, "vocab.json"), cfg["vocab_size"])
    spec = build_spec(cfg, Weights(read_safetensors(os.path.join(src, "model.safetensors"))), tokens)
    spec.validate()
    spec.optimize()  # aliases the three uses of the one embedding; stays float32
    os.makedirs(out, exist_ok=True)
    spec.save(out)
    for f in ("source.spm", "target.spm", "vocab.json"):
        shutil.copyfile(os.path.join(src, f), os.path.join(out, f))
    print(f"{out}: CTranslate2 TransformerSpec, {cfg['encoder_layers']}+{cfg['decoder_layers']} layers, "
          f"d_model {cfg['d_model']}, {cfg['activation']}, {len(tokens)} pieces, decoder start "
          f"{tokens[cfg['start']]!r}, EOS {tokens[cfg['eos']]!r}")


if __name__ == "__main__":
    main(sys.argv)
