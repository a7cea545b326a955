"""nsys_gaps.py TRACE.csv [WALL_MS] - where a profiled step's GPU sat idle, from Nsight
Systems' GPU trace (`nsys stats --report cuda_gpu_trace --format csv`: one row per kernel,
copy and memset, with its start and duration in nanoseconds), for bench/gpu-suite.

The activities are merged into one timeline (one stream or several: a gap is time when none
runs). Prints the GPU's span (first start to last end), its busy and idle time, and the idle
time split at 10 us: the short gaps are the GPU's own cost between consecutive launches, the
most CUDA graphs could save (issue 36, item 6); the long ones are the device waiting for the
host (a synchronisation, host work between launches). With WALL_MS (the step's wall time as
census_step timed it) also the host's time outside the span: before the first activity (the
batch's layout and upload) and after the last. Lists the 5 longest gaps with the activities
on either side.
"""
import csv
import statistics
import sys

SHORT_NS = 10_000


def column(header, prefix):
    """The index of the first column whose name starts with prefix ("Start (ns)" or "Start")."""
    for i, name in enumerate(header):
        if name.strip().lower().startswith(prefix):
            return i
    sys.exit(f"nsys_gaps: no column named {prefix}... in {header}")


def read(path):
    """[(start ns, end ns, name)] sorted by start."""
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    header = next(i for i, r in enumerate(rows) if any(c.strip().lower().startswith("start") for c in r))
    s, d, n = (column(rows[header], p) for p in ("start", "duration", "name"))
    out = []
    for r in rows[header + 1:]:
        try:
            start, dur = float(r[s]), float(r[d])
        except (ValueError, IndexError):
            continue
        out.append((start, start + dur, r[n]))
    if not out:
        sys.exit(f"nsys_gaps: no activities in {path}")
    return sorted(out)


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit("usage: nsys_gaps.py TRACE.csv [WALL_MS]")
    acts = read(argv[1])
    first, last = acts[0][0], max(e for _, e, _ in acts)
    gaps = []                   # (ns, activity before, activity after)
    end, before = acts[0][1], acts[0][2]
    busy = acts[0][1] - acts[0][0]
    for start, stop, name in acts[1:]:
        if start > end:
            gaps.append((start - end, before, name))
            busy += stop - start
        elif stop > end:
            busy += stop - end
        if stop > end:
            end, before = stop, name
    span = last - first
    short = [g for g, _, _ in gaps if g < SHORT_NS]
    long_ = [g for g, _, _ in gaps if g >= SHORT_NS]
    print(f"GPU timeline: {len(acts)} activities over {span / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms, "
          f"idle {(span - busy) / 1e6:.3f} ms ({(span - busy) / span * 100:.1f}%)")
    print(f"gaps under 10 us: {len(short)}, {sum(short) / 1e6:.3f} ms ({sum(short) / span * 100:.1f}% of the span)"
          + (f", median {statistics.median(short) / 1e3:.2f} us" if short else ""))
    print(f"gaps of 10 us or more: {len(long_)}, {sum(long_) / 1e6:.3f} ms ({sum(long_) / span * 100:.1f}% of the span)")
    if len(argv) == 3:
        wall = float(argv[2]) * 1e6
        print(f"step wall time {wall / 1e6:.3f} ms: {(wall - span) / 1e6:.3f} ms of it outside the GPU's span "
              f"(host work before the first activity and after the last)")
    for g, a, b in sorted(gaps, reverse=True)[:5]:
        print(f"  {g / 1e3:9.1f} us between {a[:60]} and {b[:60]}")


if __name__ == "__main__":
    main(sys.argv)
