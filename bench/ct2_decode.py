"""CTranslate2 reference for the engine's decoding benchmark (bench/decode.c).

    [CT2_COMPUTE_TYPE=int8] python3 bench/ct2_decode.py WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS]

mirrors `bench/decode run`: it converts the weights file written by `bench/decode weights`
into a CTranslate2 model with the spec API (post-norm Transformer, ReLU FFN, one embedding
shared by the encoder input, decoder input and output projection, scaled by sqrt(d_model),
the engine's interleaved sinusoidal positions from 0, LayerNorm eps 1e-5), translates the
256 sources in order in batches of BATCH with one warm-up pass and REPS timed passes, and
prints one line in the engine's format with the median time. OUT_IDS receives the output
ids, one sentence per line (without EOS). CT2_COMPUTE_TYPE (default float32) is the
translator's compute_type, e.g. int8.
"""
import os
import struct
import sys
import tempfile
import time

import ctranslate2
import numpy as np
from ctranslate2.specs import common_spec, transformer_spec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from ct2_convert import fill_layers  # noqa: E402  (the MarianMT-named layers into a spec)

SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]  # ids 0..3: the engine's pad, -, bos, eos


def read_weights(path):
    """The records of an ATTFIX1 file as {name: numpy array}."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"ATTFIX1\n":
        sys.exit(f"{path}: not an ATTFIX1 weights file")
    tensors, pos = {}, 8
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        name = data[pos + 4:pos + 4 + n].decode()
        dtype, ndim = struct.unpack_from("<II", data, pos + 4 + n)
        pos += 12 + n
        shape = struct.unpack_from(f"<{ndim}I", data, pos)
        pos += 4 * ndim
        count = int(np.prod(shape))
        tensors[name] = np.frombuffer(data, "<f4" if dtype == 0 else "<i4", count, pos).reshape(shape)
        pos += 4 * count
    return tensors


def positions(length, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): interleaved, float64
    then float32, as the engine (CTranslate2's built-in table is [sin..., cos...] from pos 1)."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    j = np.arange(d)
    angle = pos / 10000.0 ** ((j - j % 2) / d)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def build_spec(w):
    """A TransformerSpec holding the MarianMT-named parameters of w."""
    vocab, d, heads, _, enc_layers, dec_layers, pad, bos, eos, max_positions = (int(x) for x in w["config"])
    if (pad, bos, eos) != (0, 2, 3):
        sys.exit("expected pad 0, bos 2, eos 3")
    spec = transformer_spec.TransformerSpec.from_config(
        (enc_layers, dec_layers), heads, pre_norm=False, activation=common_spec.Activation.RELU)

    emb, pe = w["model.shared.weight"], positions(max_positions, d)
    spec.encoder.embeddings[0].weight = emb
    spec.decoder.embeddings.weight = emb
    spec.decoder.projection.weight = emb  # logits = h E^T, no bias
    for stack in (spec.encoder, spec.decoder):
        stack.scale_embeddings = True  # x sqrt(d_model)
        stack.position_encodings.encodings = pe
    fill_layers(spec, w.__getitem__)

    tokens = SPECIALS + [f"t{i}" for i in range(len(SPECIALS), vocab)]  # token i <-> id i
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    # decoding starts from "<s>" (id 2); the source is fed with its "</s>" and
    # add_source_eos stays False, so the encoder sees ids + EOS exactly once
    spec.config.layer_norm_epsilon = 1e-5
    spec.config.decoder_start_token = "<s>"
    spec.config.add_source_eos = False
    return spec, tokens


def main(argv):
    if len(argv) < 6:
        sys.exit("usage: ct2_decode.py WEIGHTS THREADS BEAM BATCH OFFSET [REPS] [OUT_IDS]")
    threads, beam, batch, offset = (int(x) for x in argv[2:6])
    reps = int(argv[6]) if len(argv) > 6 else 3
    if min(threads, beam, batch, reps) < 1 or offset < 0:
        sys.exit("THREADS, BEAM, BATCH and REPS must be >= 1, OFFSET >= 0")
    w = read_weights(argv[1])
    spec, tokens = build_spec(w)
    ids = {t: i for i, t in enumerate(tokens)}
    sources = [[tokens[i] for i in row[:list(row).index(3) + 1]] for row in w["sources"]]
    batches = [sources[b:b + batch] for b in range(0, len(sources), batch)]
    if any(len({len(s) for s in chunk}) != 1 for chunk in batches):
        sys.exit("the sources of a batch must have equal lengths (BATCH must divide 32)")

    with tempfile.TemporaryDirectory() as model_dir:
        spec.validate()
        spec.optimize()  # aliases the three copies of the shared embedding; stays float32
        spec.save(model_dir)
        translator = ctranslate2.Translator(model_dir, device="cpu", inter_threads=1,
                                            intra_threads=threads,
                                            compute_type=os.environ.get("CT2_COMPUTE_TYPE", "float32"))

    def translate():
        """One pass over the sources: each output's ids, cut to its limit."""
        out = []
        for chunk in batches:
            # The engine allows limit = source tokens (without EOS) + OFFSET output tokens and
            # then forces EOS: limit + 1 decoder steps at most. CTranslate2 counts the EOS step
            # in max_decoding_length and stops without EOS at the limit, so it gets limit + 1
            # steps (the same work); a hypothesis reaching limit + 1 tokens is cut to limit,
            # its last step standing for the engine's forced EOS.
            limit = len(chunk[0]) - 1 + offset
            # CTranslate2's length penalty: score = log P(Y) / |Y|^length_penalty with |Y| the
            # output tokens without EOS (the engine: log P(Y) / ((5 + |Y| + 1) / 6)^0.6, GNMT).
            # min_decoding_length=0: the engine may end with EOS at the first step too.
            results = translator.translate_batch(
                chunk, max_batch_size=batch, beam_size=beam, length_penalty=0.6,
                max_decoding_length=limit + 1, min_decoding_length=0)
            out += [[ids[t] for t in r.hypotheses[0]][:limit] for r in results]
        return out

    translate()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = translate()
        times.append(time.perf_counter() - t0)
    seconds = sorted(times)[reps // 2]  # the engine's median (the upper one for even REPS)
    n_tokens = sum(len(hyp) + 1 for hyp in out)  # output tokens + EOS, as the engine counts
    if len(argv) > 7:
        with open(argv[7], "w") as f:
            f.writelines(" ".join(map(str, hyp)) + "\n" for hyp in out)
    print(f"ct2 decode precision={os.environ.get('CT2_COMPUTE_TYPE', 'float32')} d_model={int(w['config'][1])} beam={beam} batch={batch} threads={threads} "
          f"sentences={len(sources)} tokens={n_tokens} seconds={seconds:.3f} "
          f"tokens_per_s={n_tokens / seconds:.0f} sentences_per_s={len(sources) / seconds:.1f}")


if __name__ == "__main__":
    main(sys.argv)
