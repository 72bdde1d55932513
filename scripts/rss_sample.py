#!/usr/bin/env python3
"""Run a command and sample its resident memory (VmRSS) every second.

usage: scripts/rss_sample.py NAME COMMAND...
writes NAME.log (the command's stderr), NAME.rss.csv (t_s, rss_kb) and NAME.json (exit status,
wall time, first/last sample and the growth after warm-up: the largest sample after the first
fifth of the run less the largest during it, as BENCHMARKS.md reports it).
"""
import subprocess, sys, time, json
out = sys.argv[1]
cmd = sys.argv[2:]
t0 = time.time()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(out + ".log", "w"))
rows = []
while p.poll() is None:
    try:
        for l in open(f"/proc/{p.pid}/status"):
            if l.startswith("VmRSS:"):
                rows.append((time.time() - t0, int(l.split()[1])))
    except FileNotFoundError:
        pass
    time.sleep(1.0)
wall = time.time() - t0
with open(out + ".rss.csv", "w") as f:
    f.write("t_s,rss_kb\n")
    for t, r in rows:
        f.write(f"{t:.1f},{r}\n")
warm = len(rows) // 5
during = max(r for _, r in rows[:warm]) if warm else 0
after = max(r for _, r in rows[warm:]) if rows else 0
json.dump({"cmd": cmd, "rc": p.returncode, "wall_s": wall, "samples": len(rows),
           "rss_first_kb": rows[0][1] if rows else None, "rss_end_kb": rows[-1][1] if rows else None,
           "max_during_warmup_kb": during, "max_after_kb": after, "growth_kb": after - during},
          open(out + ".json", "w"), indent=1)
