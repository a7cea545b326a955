"""bench/m2m100_interop.py EXPORTED FIXTURE [EXPORTED FIXTURE ...] (by hand; a Python with
transformers 4.40, torch and sentencepiece): an M2M-100 or NLLB-200 fixture of
test/fixtures/m2m/ imported and exported by scripts/export-hf, read back by its readers.
For each pair: every tensor of the exported model.safetensors equal to the fixture's,
bitwise; M2M100ForConditionalGeneration and AutoTokenizer(use_fast=False) load the exported
directory; its greedy translations (forced target language, the fixture's length limit) and
decoded texts of the fixture's sentences equal the fixture's reference. Exits non-zero on a
difference.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, M2M100ForConditionalGeneration


def check(exported, fixture):
    a, b = load_file(f"{fixture}/model.safetensors"), load_file(f"{exported}/model.safetensors")
    bitwise = set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    tok = AutoTokenizer.from_pretrained(exported, use_fast=False)
    model = M2M100ForConditionalGeneration.from_pretrained(exported).eval()
    ref = json.load(open(f"{fixture}/reference.json", encoding="utf-8"))
    tok.src_lang = ref["src_lang"]
    target = ref["tgt_lang"] if type(tok).__name__.startswith("Nllb") else f"__{ref['tgt_lang']}__"
    forced = tok.convert_tokens_to_ids(target)
    equal = 0
    for r in ref["sentences"]:
        enc = tok(r["source"], return_tensors="pt")
        n = enc.input_ids.shape[1] - 2
        with torch.no_grad():
            out = model.generate(**enc, num_beams=1, do_sample=False, forced_bos_token_id=forced,
                                 max_new_tokens=n + 52, bad_words_ids=[[tok.pad_token_id]])
        ids = out[0, 2:].tolist()
        ids = ids[:ids.index(2)] if 2 in ids else ids
        ids = ids[:n + 50]
        equal += tok.convert_ids_to_tokens(ids) == r["tokens"] and tok.decode(ids, skip_special_tokens=True) == r["text"]
    print(f"{exported}: {type(tok).__name__}, tensors bitwise equal to {fixture}: {bitwise}; greedy pieces and texts "
          f"equal to the reference: {equal}/{len(ref['sentences'])}")
    return bitwise and equal == len(ref["sentences"])


if __name__ == "__main__":
    args = sys.argv[1:]
    ok = all([check(args[i], args[i + 1]) for i in range(0, len(args), 2)])
    sys.exit(0 if ok else 1)
