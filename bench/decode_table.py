"""The table of a bench/run_decode output file: medians per setting and toolkit, with ratios.

    python3 bench/decode_table.py bench/results/decode-HOST-DATE.txt

Reads the "## size" markers and the result lines of bench/decode, bench/ct2_decode.py and
bench/reference_decode.py; prints a Markdown table of target tokens/s (medians over rounds)
for engine int8 and fp32, CTranslate2 int8 and fp32 and PyTorch fp32, the ratios engine int8 /
CTranslate2 int8 and engine fp32 / CTranslate2 fp32, and the engine's resident memory in each
precision.
"""
import re
import statistics
import sys

LINE = re.compile(r"(engine|ct2|pytorch) decode (?:device=\S+ )?(?:precision=(\S+) )?d_model=\d+ beam=(\d+) "
                  r"batch=(\d+) .*tokens_per_s=(\d+)(?: .*resident_mb=([\d.]+))?")
NAMES = {"int8": "int8", "float32": "fp32", "fp32": "fp32", None: "fp32"}


def main(path):
    runs, size = {}, None
    for line in open(path):
        if line.startswith("## "):
            size = line.split()[1]
            continue
        m = LINE.match(line)
        if m and size:
            tool, precision, beam, batch, tps, rss = m.groups()
            key = (size, int(beam), int(batch), f"{tool} {NAMES[precision]}")
            runs.setdefault(key, []).append((int(tps), float(rss) if rss else None))
    cols = ["engine int8", "engine fp32", "ct2 int8", "ct2 fp32", "pytorch fp32"]
    print()
    print("| model | beam | batch | engine int8 | engine fp32 | CTranslate2 int8 | CTranslate2 fp32 | PyTorch fp32 "
          "| engine int8 / CT2 int8 | engine fp32 / CT2 fp32 | engine resident MB int8 / fp32 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    order = {"small": 0, "base": 1, "marian": 2}
    for setting in sorted({k[:3] for k in runs}, key=lambda k: (order.get(k[0], 9), -k[1], -k[2])):
        med, rss = {}, {}
        for c in cols:
            rows = runs.get(setting + (c,))
            med[c] = statistics.median(r[0] for r in rows) if rows else None
            rss[c] = statistics.median(r[1] for r in rows) if rows and rows[0][1] is not None else None
        cell = lambda v: f"{v:,.0f}" if v else "-"
        ratio = lambda a, b: f"**{a / b:.2f}x**" if a and b else "-"
        mem = f"{rss['engine int8']:.0f} / {rss['engine fp32']:.0f}" if rss["engine int8"] and rss["engine fp32"] else "-"
        print(f"| {setting[0]} | {setting[1]} | {setting[2]} | " + " | ".join(cell(med[c]) for c in cols)
              + f" | {ratio(med['engine int8'], med['ct2 int8'])} | {ratio(med['engine fp32'], med['ct2 fp32'])} | {mem} |")


if __name__ == "__main__":
    main(sys.argv[1])
