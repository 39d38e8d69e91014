#!/usr/bin/env python3
"""Summarize run.sh output: the median over the repetitions of each case and
transport (wall seconds, or for the daemoncpu/gobuildcpu rows the daemons'
user+system CPU seconds), and io_uring's ratio to each /dev/fuse transport
(below 1 is an io_uring win; 0.77 or less is the 30 % the decision rule of
issue 10 asks for).

usage: summarize.py OUT_FILE [LABEL]
"""
import re
import statistics
import sys
from collections import defaultdict

vals = defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    phase = line.split()[3]
    key = (int(f["mounts"]), phase, int(f.get("clients", 1)))
    value = float(f["cpu_s"]) if "cpu_s" in f else float(f["wall_s"])
    vals[(key, f["transport"])].append(value)

order = [t for t in ("dev", "dev2", "uring") if any(tr == t for _, tr in vals)]
names = {"dev": "/dev/fuse", "dev2": "/dev/fuse 2 thr clone-fd", "uring": "io_uring"}
base = [t for t in order if t != "uring"]
label = sys.argv[2] if len(sys.argv) > 2 else ""
print("| " + label + " case | " + " | ".join(names[t] + " (median)" for t in order) + " | "
      + " | ".join(f"io_uring / {names[t]}" for t in base) + " |")
print("|" + " --- |" * (1 + len(order) + len(base)))
for key in sorted({k for k, _ in vals}, key=lambda k: (k[0], k[2], k[1])):
    med = {t: statistics.median(vals[(key, t)]) for t in order if vals.get((key, t))}
    if len(med) != len(order):
        continue
    mounts, phase, clients = key
    where = f"{clients} clients" + (f" on {mounts} mounts" if mounts > 1 else "")
    case = {"daemoncpu": f"daemon CPU s, all 3 phases, {where}", "gobuild": "go build -a -p 2, wall s",
            "gobuildcpu": "go build -a -p 2, daemon CPU s"}.get(phase, f"{phase}, {where}, wall s")
    n = len(vals[(key, order[0])])
    print(f"| {case} | " + " | ".join(f"{med[t]:.2f}" for t in order) + " | "
          + " | ".join(f"{med['uring'] / med[t]:.2f}" if med[t] else "-" for t in base) + f" |")
