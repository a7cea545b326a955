#!/usr/bin/env python3
"""Builds the English->German corpus from Debian's translated package descriptions.

Reads apt's Translation-en and Translation-de index files (any compression, through
apt-helper), aligns descriptions by Description-md5, and pairs the short descriptions
plus the body paragraphs of descriptions whose two sides have the same number of
paragraphs. Pairs are normalised for whitespace, de-duplicated (one target per source,
so no source sentence can land in two splits), length-filtered, and split
deterministically by a hash of the source: test (2000), valid (1000), train (the rest).

Usage: build_corpus.py OUT_DIR TRANSLATION_FILE...
Writes OUT_DIR/{train,valid,test}.{en,de} and prints the counts.
"""
import hashlib
import re
import subprocess
import sys

TEST_SIZE = 2000
VALID_SIZE = 1000
MAX_WORDS = 80
MAX_RATIO = 3.0


def read_index(path):
    """Yields (md5, language, short, [paragraph, ...]) for every stanza of one file."""
    text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path],
                          check=True, capture_output=True).stdout.decode("utf-8", "replace")
    for stanza in text.split("\n\n"):
        md5 = None
        lang = None
        lines = []
        in_desc = False
        for line in stanza.split("\n"):
            if line.startswith("Description-md5:"):
                md5 = line.split(":", 1)[1].strip()
                in_desc = False
            elif line.startswith("Description-"):
                key, value = line.split(":", 1)
                lang = key[len("Description-"):]
                lines = [value.strip()]
                in_desc = True
            elif in_desc and line.startswith(" "):
                lines.append(line[1:])
            else:
                in_desc = False
        if md5 and lang and lines:
            paragraphs, current = [], []
            for line in lines[1:]:
                if line.strip() == ".":
                    paragraphs.append(current)
                    current = []
                else:
                    current.append(line)
            paragraphs.append(current)
            yield md5, lang, lines[0], [" ".join(p) for p in paragraphs if p]


def clean(s):
    return re.sub(r"\s+", " ", s).strip()


def keep(src, tgt):
    ns, nt = len(src.split()), len(tgt.split())
    if ns == 0 or nt == 0 or ns > MAX_WORDS or nt > MAX_WORDS:
        return False
    return max(ns, nt) / min(ns, nt) <= MAX_RATIO


def main():
    out_dir, files = sys.argv[1], sys.argv[2:]
    descs = {"en": {}, "de": {}}
    for path in files:
        for md5, lang, short, paragraphs in read_index(path):
            if lang in descs:
                descs[lang].setdefault(md5, (short, paragraphs))
    raw = []
    for md5, (en_short, en_pars) in descs["en"].items():
        if md5 not in descs["de"]:
            continue
        de_short, de_pars = descs["de"][md5]
        raw.append((en_short, de_short))
        if len(en_pars) == len(de_pars):
            raw.extend(zip(en_pars, de_pars))
    candidates = sorted({(clean(s), clean(t)) for s, t in raw})
    by_source = {}
    for src, tgt in candidates:
        if keep(src, tgt):
            by_source.setdefault(src, tgt)
    pairs = sorted(by_source.items(), key=lambda p: hashlib.sha1(p[0].encode()).hexdigest())
    splits = {"test": pairs[:TEST_SIZE], "valid": pairs[TEST_SIZE:TEST_SIZE + VALID_SIZE],
              "train": pairs[TEST_SIZE + VALID_SIZE:]}
    for name, rows in splits.items():
        for side, lang in ((0, "en"), (1, "de")):
            with open(f"{out_dir}/{name}.{lang}", "w", encoding="utf-8") as f:
                for row in rows:
                    f.write(row[side] + "\n")
        words = (sum(len(r[0].split()) for r in rows), sum(len(r[1].split()) for r in rows))
        print(f"{name}: {len(rows)} pairs, {words[0]} English words, {words[1]} German words")
    print(f"aligned descriptions: {sum(1 for m in descs['en'] if m in descs['de'])}, "
          f"candidate pairs: {len(raw)}, kept: {len(pairs)}")


if __name__ == "__main__":
    main()
