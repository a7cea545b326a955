"""pgbench_stats.py LOGDIR LABEL: statements/s and latency percentiles from pgbench's
per-statement logs (pgbench -l) in LOGDIR; prints one line
"LABEL statements=N tps=X p50_ms=Y p90_ms=Z p99_ms=W".

Each client's first statement is left out (it may load a model or start a service), and
statements/s counts the rest over the span from the first one's start to the last one's end.
Used by bench/service and bench/concurrency."""
import glob
import statistics
import sys


def main():
    logs, label = sys.argv[1], sys.argv[2]
    lat, starts, ends = [], [], []
    for f in glob.glob(logs + "/pgbench_log.*"):
        by_client = {}
        for line in open(f):
            r = line.split()
            by_client.setdefault(r[0], []).append(r)
        for rows in by_client.values():
            rows.sort(key=lambda r: (int(r[4]), int(r[5])))
            for r in rows[1:]:
                ms = int(r[2]) / 1000.0
                end = int(r[4]) + int(r[5]) / 1e6
                lat.append(ms)
                ends.append(end)
                starts.append(end - ms / 1000.0)
    if not lat:
        print(f"{label} statements=0 tps=0 p50_ms=0 p90_ms=0 p99_ms=0")
        return
    lat.sort()
    span = max(ends) - min(starts)
    pick = lambda q: lat[int(q * (len(lat) - 1))]
    print(f"{label} statements={len(lat)} tps={len(lat) / span:.2f} p50_ms={statistics.median(lat):.0f} "
          f"p90_ms={pick(0.9):.0f} p99_ms={pick(0.99):.0f}")


if __name__ == "__main__":
    main()
