#!/usr/bin/env python3
"""bench/interop.py OURS_JSON EXPORT_DIR [CT2_DIR]: compares this engine's translations of a
model with those of transformers loading its export, and of CTranslate2 loading its
scripts/export-ct2 conversion (bench/interop runs it).

OURS_JSON: [{"source", "tokens" (greedy, pieces), "translation", "scored" (a target text: the
translation, or the fixture's), "score" (attention.score of scored)}, ...]. EXPORT_DIR:
scripts/export-hf's directory. transformers decodes greedily as the fixtures do
(max_new_tokens = source pieces + 51, pad banned, no forced EOS, cut to source pieces + 50
tokens); equal wherever its top-2 margin exceeds 1e-3 at every step is what must hold. Its
teacher-forced log-probability of the scored text is compared with attention.score. CT2_DIR (scripts/export-ct2's output, float32 on the CPU): the source is
CT2_DIR/source.spm's pieces plus the EOS piece, decoded as scripts/ct2_convert.py documents
(beam_size 1, min_decoding_length 0, max_decoding_length = source pieces + 50, pad
suppressed, no EOS returned); its greedy pieces must equal ours wherever CTranslate2's own
top-2 logit margin exceeds 1e-3 at every step (return_logits_vocab), and every sentence is
counted. Prints one summary line per engine; exits non-zero when a decided translation differs.
"""
import json
import sys

import numpy as np
import torch
from transformers import GenerationConfig, MarianMTModel, MarianTokenizer


def ct2_compare(ours, hf_tokens, ct2_dir):
    """Prints CTranslate2's summary line; True when every decided translation equals ours."""
    import ctranslate2
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=ct2_dir + "/source.spm")
    with open(ct2_dir + "/config.json", encoding="utf-8") as f:
        eos = json.load(f)["eos_token"]
    translator = ctranslate2.Translator(ct2_dir, device="cpu", compute_type="float32")
    agree = agree_hf = decided = decided_equal = empty = 0
    for row, hf in zip(ours, hf_tokens):
        source = sp.encode(row["source"], out_type=str) + [eos]
        n = len(source) - 1
        res = translator.translate_batch([source], beam_size=1, min_decoding_length=0, max_decoding_length=n + 50,
                                         suppress_sequences=[["<pad>"]], return_logits_vocab=True)[0]
        out = res.hypotheses[0]
        margin = min(float(np.diff(np.sort(np.asarray(step, dtype=np.float64))[-2:])[0]) for step in res.logits[0])
        same = out == row["tokens"]
        agree += same
        agree_hf += out == hf
        empty += len(out) == 0
        if margin > 1e-3:
            decided += 1
            decided_equal += same
    print(f"CTranslate2 {ctranslate2.__version__} (scripts/export-ct2): greedy equal to ours {agree}/{len(ours)}; "
          f"decided (every top-2 margin > 1e-3) {decided_equal}/{decided} equal; equal to transformers' "
          f"{agree_hf}/{len(ours)}; {empty} empty")
    return decided_equal == decided


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: interop.py OURS_JSON EXPORT_DIR [CT2_DIR]")
    ours = json.load(open(sys.argv[1], encoding="utf-8"))
    export = sys.argv[2]
    tok = MarianTokenizer.from_pretrained(export)
    model = MarianMTModel.from_pretrained(export).eval()
    cfg = model.config
    pad, eos = cfg.pad_token_id, cfg.eos_token_id
    equal = decided = decided_equal = 0
    worst_score = 0.0
    hf_tokens = []
    for row in ours:
        enc = tok(row["source"], return_tensors="pt")
        n = enc.input_ids.shape[1] - 1
        limit = n + 50
        gen = GenerationConfig(num_beams=1, do_sample=False, max_new_tokens=n + 51, bad_words_ids=[[pad]],
                               forced_eos_token_id=None, decoder_start_token_id=cfg.decoder_start_token_id,
                               eos_token_id=eos, pad_token_id=pad)
        with torch.no_grad():
            res = model.generate(**enc, generation_config=gen, output_scores=True, return_dict_in_generate=True)
        ids = res.sequences[0, 1:].tolist()
        end = ids.index(eos) if eos in ids else len(ids)
        tokens = tok.convert_ids_to_tokens(ids[:min(end, limit)])
        hf_tokens.append(tokens)
        margin = min(float(torch.topk(res.scores[s][0], 2).values.diff().abs()) for s in range(min(end + 1, limit)))
        same = tokens == row["tokens"]
        equal += same
        if margin > 1e-3:
            decided += 1
            decided_equal += same
        labels = tok(text_target=row["scored"], return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(**enc, labels=labels).logits.double()
        lp = float(torch.log_softmax(logits, -1)[0].gather(1, labels[0, :, None]).sum())
        worst_score = max(worst_score, abs(lp - row["score"]))
    print(f"transformers: greedy equal {equal}/{len(ours)}; decided (every top-2 margin > 1e-3) "
          f"{decided_equal}/{decided} equal; worst |score - transformers' log-probability| {worst_score:.2e}")
    ok = decided_equal == decided
    if len(sys.argv) > 3:
        ok = ct2_compare(ours, hf_tokens, sys.argv[3]) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
