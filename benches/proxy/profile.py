#!/usr/bin/env python3
"""Where a long-lived proxy spends its CPU per connection (or per round trip), readyprism beside HAProxy.

Usage (as root, or with perf_event_paranoid low enough; needs perf, nstat (iproute2), openssl
and python3):

    cargo build --release --locked
    python3 benches/proxy/profile.py [-n 3000] [--rounds 3] [--round-trips K] [--keep DIR]

`cargo bench --bench proxy` starts fresh processes every round, so a profile of it mixes each
proxy's start-up (readyprism's TLS probes, HAProxy's libcrypto and ld.so) into the per-connection
samples. This script keeps one process per proxy (started by strace_count.py's harness: the same
backend, configs and warm-up) and, per round, alternating the two proxies:

1. a plain window: `-n` short connections made one after the other (connect, 1 byte each way,
   the backend closes first), or with `--round-trips K` connections making K round trips each;
   the proxy's CPU from `/proc/<pid>/task/*/schedstat` (run time, times put on a CPU, and the
   sleeps from `voluntary_ctxt_switches`) and the TCP segments this host sent (`nstat`
   TcpOutSegs, the client's and backend's included) per connection or round trip;
2. the same work under `perf record -F 10000 -p <pid>`: the share of samples in the kernel, in
   the proxy's own code and in libc, and the proxy's ten hottest user-space symbols.

The plain window's CPU is the figure to compare (perf's own interrupts inflate the second
window's). Prints the medians over the rounds, and the ratio readyprism/HAProxy. Sampling is on
`cpu-clock` where the VM exposes no hardware counters, so a symbol's share is only as sharp as
the timer interrupt lands: compare shares between proxies, not single kernel functions.
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strace_count as harness  # noqa: E402  (a sibling script, not a package)


def schedstat(pid):
    """(run ns, times put on a CPU, voluntary sleeps) summed over `pid`'s threads."""
    run = runs = sleeps = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                fields = f.read().split()
            with open(f"/proc/{pid}/task/{t}/status") as f:
                m = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", f.read(), re.M)
        except FileNotFoundError:  # a blocking-pool thread that just ended
            continue
        run += int(fields[0])
        runs += int(fields[2])
        sleeps += int(m.group(1)) if m else 0
    return run, runs, sleeps


def out_segs():
    out = subprocess.run(["nstat", "-az", "TcpOutSegs"], capture_output=True, text=True).stdout
    m = re.search(r"^TcpOutSegs\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def plain(pid, work, units):
    """Per unit: proxy CPU (µs), times on a CPU, sleeps, TCP segments sent on this host."""
    r0, n0, s0 = schedstat(pid)
    g0 = out_segs()
    work()
    g1 = out_segs()
    r1, n1, s1 = schedstat(pid)
    return {"cpu_us": (r1 - r0) / units / 1000, "runs": (n1 - n0) / units,
            "sleeps": (s1 - s0) / units, "segments": (g1 - g0) / units}


def profiled(pid, work, out, binary):
    """Runs `work` under perf record; returns the shares (%) of kernel, own code, libc, and the top symbols."""
    perf = subprocess.Popen(["perf", "record", "-F", "10000", "-o", out, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attached: its first samples come within milliseconds
    work()
    perf.send_signal(signal.SIGINT)
    perf.wait()
    report = subprocess.run(["perf", "report", "-i", out, "--no-children", "--sort", "dso,sym",
                             "--stdio", "-g", "none"], capture_output=True, text=True).stdout
    shares = {"kernel": 0.0, "own": 0.0, "libc": 0.0, "other": 0.0}
    user = []
    for line in report.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+(\S+)\s+\[([.k])\]\s+(.*)$", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        if kind == "k":
            shares["kernel"] += pct
        elif dso == os.path.basename(binary):
            shares["own"] += pct
            user.append((pct, sym))
        elif dso.startswith("libc"):
            shares["libc"] += pct
            user.append((pct, "libc: " + sym))
        else:
            shares["other"] += pct
    return shares, sorted(user, reverse=True)[:10]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(harness.ROOT, "target/release/readyprism"))
    ap.add_argument("-n", type=int, default=3000, help="connections per window")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the two proxies alternating")
    ap.add_argument("--round-trips", type=int, default=0, metavar="K",
                    help="connections of K round trips each; figures per round trip")
    ap.add_argument("--keep", help="keep the perf.data files in this directory")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="proxy-profile-") as d:
        keep = args.keep or d
        os.makedirs(keep, exist_ok=True)
        proxies = {}
        try:
            for name, haproxy in (("readyprism", False), ("HAProxy", True)):
                sub = os.path.join(d, name)
                os.makedirs(sub)
                proxies[name] = harness.start_proxy(sub, haproxy, args.binary)
            results = {name: [] for name in proxies}
            for r in range(args.rounds):
                names = list(proxies) if r % 2 == 0 else list(reversed(proxies))
                for name in names:
                    rp, listen, _ = proxies[name]
                    if args.round_trips > 0:
                        units = args.n * args.round_trips
                        work = lambda: [harness.round_trips(listen, args.round_trips) for _ in range(args.n)]
                    else:
                        units = args.n
                        work = lambda: [harness.one_connection(listen) for _ in range(args.n)]
                    row = plain(rp.pid, work, units)
                    binary = "haproxy" if name == "HAProxy" else args.binary
                    shares, top = profiled(rp.pid, work, os.path.join(keep, f"{name}-{r}.data"), binary)
                    row.update(shares)
                    row["top"] = top
                    results[name].append(row)
                    print(f"round {r + 1}/{args.rounds} {name}: {row['cpu_us']:.1f} µs CPU per "
                          f"{'round trip' if args.round_trips else 'connection'}, kernel {shares['kernel']:.1f} %",
                          file=sys.stderr)
        finally:
            for rp, _, log in proxies.values():
                rp.terminate()
                rp.wait()
                log.close()

    unit = f"round trip (connections of {args.round_trips})" if args.round_trips else "connection"
    print(f"per {unit}, medians of {args.rounds} rounds of {args.n} connections:")
    print(f"{'measure':<32} {'readyprism':>11} {'HAProxy':>9} {'ratio':>7}")
    rows = (("proxy CPU (µs), plain window", "cpu_us"), ("times put on a CPU", "runs"),
            ("sleeps", "sleeps"), ("TCP segments sent (host)", "segments"),
            ("perf: kernel (% of samples)", "kernel"), ("perf: own code (%)", "own"),
            ("perf: libc (%)", "libc"))
    for label, key in rows:
        a = statistics.median(x[key] for x in results["readyprism"])
        b = statistics.median(x[key] for x in results["HAProxy"])
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{label:<32} {a:>11.2f} {b:>9.2f} {ratio:>7}")
    for name in results:
        print(f"\n{name}: hottest user-space symbols, last round (% of its samples)")
        for pct, sym in results[name][-1]["top"]:
            print(f"  {pct:5.2f}  {sym[:100]}")


if __name__ == "__main__":
    main()
