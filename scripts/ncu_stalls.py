#!/usr/bin/env python3
"""Summarise ncu's per-instruction warp-state samples of one kernel.

Usage (on the GPU machine):
  ncu --clock-control none --cache-control none -k regex:'^gcc_peaks$' --launch-skip 200 \
      --launch-count 1 --warp-sampling-interval 0 --section SourceCounters \
      --section WarpStateStats -o prof ./sonotrack -q bench --backend cuda --what live
  ncu --import prof.ncu-rep --page source --csv --print-source sass > sass.csv
  scripts/ncu_stalls.py sass.csv [N]

Prints the kernel's instruction count, its samples and executed warp instructions, the samples
by stall reason, and the N instructions with the most samples (default 40), in program order:
index, samples, times executed, SASS, and their stall reasons. Samples per index range show
where a kernel's time goes.
"""
import csv
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    if len(rows) < 2:
        sys.exit(f"{sys.argv[1]}: no ncu source table (was it exported with --page source?)")
    head = rows[1]
    data = [r for r in rows[2:] if len(r) == len(head)]
    ix = {k: i for i, k in enumerate(head)}
    try:
        samples = ix["Warp Stall Sampling (All Samples)"]
        executed = ix["Instructions Executed"]
        source = ix["Source"]
    except KeyError as e:
        sys.exit(f"{sys.argv[1]}: column {e} missing (profile with --section SourceCounters)")
    reasons = [k for k in head if k.startswith("stall_") and "Not Issued" not in k]

    def num(r, i):
        try:
            return int(r[i].replace(",", ""))
        except ValueError:
            return 0

    total = sum(num(r, samples) for r in data)
    print(f"instructions {len(data)} samples {total} "
          f"warp-instructions executed {sum(num(r, executed) for r in data)}")
    by_reason = {k: sum(num(r, ix[k]) for r in data) for k in reasons}
    print(" ".join(f"{k[6:]}={v}" for k, v in sorted(by_reason.items(), key=lambda x: -x[1]) if v))
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    top = sorted(range(len(data)), key=lambda i: -num(data[i], samples))[:n]
    for i in sorted(top):
        r = data[i]
        why = " ".join(f"{k[6:]}={num(r, ix[k])}" for k in reasons if num(r, ix[k]))
        print(f"{i:5d} {num(r, samples):5d} ex={num(r, executed):>6d} "
              f"{r[source].strip()[:60]:60s} {why}")


if __name__ == "__main__":
    main()
