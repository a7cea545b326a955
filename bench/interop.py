#!/usr/bin/env python3
"""bench/interop.py OURS_JSON EXPORT_DIR [CT2_DIR]: compares this engine's translations of a
model with those of transformers (and CTranslate2) loading its export (bench/interop runs it).

OURS_JSON: [{"source", "tokens" (greedy, pieces), "translation", "score" (attention.score of
the translation)}, ...]. EXPORT_DIR: scripts/export-hf's directory. transformers decodes
greedily as the fixtures do (max_new_tokens = source pieces + 51, pad banned, no forced EOS,
cut to source pieces + 50 tokens); equal wherever its top-2 margin exceeds 1e-3 at every step
is what must hold. Its teacher-forced log-probability of our translation's text is compared
with attention.score. With CT2_DIR (ct2-transformers-converter's output), CTranslate2's greedy
translations (max_decoding_length = source pieces + 50) are compared too, leaving out the
sentences whose translation is empty here (CTranslate2 does not allow EOS as the first token).
Prints one summary line per engine; exits non-zero when a decided translation differs.
"""
import json
import sys

import torch
from transformers import GenerationConfig, MarianMTModel, MarianTokenizer


def main():
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
        labels = tok(text_target=row["translation"], return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(**enc, labels=labels).logits.double()
        lp = float(torch.log_softmax(logits, -1)[0].gather(1, labels[0, :, None]).sum())
        worst_score = max(worst_score, abs(lp - row["score"]))
    print(f"transformers: greedy equal {equal}/{len(ours)}; decided (every top-2 margin > 1e-3) "
          f"{decided_equal}/{decided} equal; worst |score - transformers' log-probability| {worst_score:.2e}")
    ok = decided_equal == decided
    if len(sys.argv) > 3:
        import ctranslate2
        translator = ctranslate2.Translator(sys.argv[3], device="cpu")
        agree = agree_hf = compared = empty_ct2 = 0
        for row, hf in zip(ours, hf_tokens):
            source = tok.convert_ids_to_tokens(tok(row["source"]).input_ids)
            n = len(source) - 1
            out = translator.translate_batch([source], beam_size=1, max_decoding_length=n + 50)[0].hypotheses[0]
            out = out[:n + 50]
            empty_ct2 += len(out) == 0
            if not row["tokens"]:
                continue        # CTranslate2 never ends before a first token (EOS is not allowed first)
            compared += 1
            agree += out == row["tokens"]
            agree_hf += out == hf
        print(f"CTranslate2 {ctranslate2.__version__}: greedy equal to ours {agree}/{compared}, to transformers' "
              f"{agree_hf}/{compared} (leaving out the {len(ours) - compared} empty translations of ours; "
              f"CTranslate2 gave {empty_ct2} empty)")
        ok = ok and (sys.argv[4:] != ["--require-ct2"] or agree == compared)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
