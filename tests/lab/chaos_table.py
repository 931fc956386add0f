#!/usr/bin/env python3
"""The by-hand chaos run's record as Markdown: one row per seed from the runs' JSON records
(`target/partition-lab/chaos-<seed>.json`, written by `tests/partition/chaos/run.rs`), then the
faults and balancer events drawn over all of them.

  python3 tests/lab/chaos_table.py target/partition-lab [FIRST LAST]
"""

import collections
import glob
import json
import os
import re
import sys

# The kind of an event from its words (`schedule.rs`'s `describe`), as `kind_name` names it.
KINDS = [
    (r"^no quorum at", "no quorum"),
    (r"^etcd of .* stopped", "member stopped"),
    (r"^etcd leader stopped", "leader stopped"),
    (r"^cut ", "cut"),
    (r"^drop ", "one-way drop"),
    (r" isolated$", "site isolated"),
    (r"^SYN black hole", "SYN black hole"),
    (r"% loss ", "loss"),
    (r"^graceful restart", "apiserver graceful restart"),
    (r"left out of the Endpoints", "discovery answer without a site"),
    (r"^SIGHUP", "SIGHUP"),
    (r"^config edit: a comment", "config edit (comment)"),
    (r"^config edit: health.interval", "config edit (interval)"),
    (r"^readyprism restarted", "readyprism restart"),
    (r"certificate rotated", "certificate rotation"),
    (r"^herd:", "herd"),
]


def kind(what):
    for pattern, name in KINDS:
        if re.search(pattern, what):
            return name
    return "other: " + what


def none_ready(r):
    """The share of samples with no backend ready (`-` in a record that kept no samples)."""
    sampled = r.get("sampled")
    if not sampled:
        return "-"
    return f"{round(100 * sum(1 for s in sampled if s[4] == 1.0) / len(sampled))} %"


def main():
    directory = sys.argv[1]
    first, last = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (None, None)
    records = []
    for path in glob.glob(os.path.join(directory, "chaos-*.json")):
        name = os.path.basename(path)[len("chaos-"):-len(".json")]
        if not name.isdigit():
            continue
        seed = int(name)
        if first is not None and not first <= seed <= last:
            continue
        with open(path) as f:
            records.append(json.load(f))
    records.sort(key=lambda r: r["seed"])
    total = collections.Counter()
    print("| seed | learned by | events | faults | longest lease gap | samples with none ready | violations |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        kinds = collections.Counter(kind(e["what"]) for e in r["events"])
        total.update(kinds)
        faults = sum(1 for e in r["events"] if e["len"] > 0)
        violations = "; ".join(
            f"{v['invariant']} at {v['t']:.1f} s: {v['what']}" for v in r["violations"]
        ) or "none"
        print(
            f"| {r['seed']} | {'discovery' if r.get('discovery') else 'listed'} | "
            f"{len(r['events'])} | {faults} | {r['longest_lease_gap']:.1f} s | "
            f"{none_ready(r)} | "
            f"{violations} |"
        )
    clean = sum(1 for r in records if not r["violations"])
    print()
    print(f"{len(records)} seeds, {clean} without a violation; "
          f"{sum(1 for r in records if r.get('discovery'))} with discovery on. Events drawn:")
    print()
    print("| event | drawn |")
    print("|---|---|")
    for name, n in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {n} |")


if __name__ == "__main__":
    main()
