#!/usr/bin/env python3
"""A herd for the partition lab's scenario 8: N clients that dial the balancer at once, in the
node's namespace. Each makes one `GET /whoami` with client-go's retries (kubelet.py's `fetch`,
TIMEOUT s per attempt) on its own new connection; all start together (a barrier). Prints one
JSON object: {"dials": N, "ok": k, "seconds": [...], "sites": {...}, "errors": [...],
"results": [[t0, t1, ok, site, attempts, error], ...]} (t0, t1: each dial's wall-clock start and end).

  dialer.py --server 127.0.0.1:7445 --ca CA.pem --cert KUBELET.pem [--clients 50] [--timeout 10]
"""

import argparse
import json
import threading
import time

from kubelet import context, fetch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", default="127.0.0.1:7445")
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args()
    host, port = args.server.rsplit(":", 1)
    ctx = context(args.ca, args.cert)
    barrier = threading.Barrier(args.clients)
    results = [None] * args.clients

    def one(i):
        barrier.wait()
        t0, wall0 = time.monotonic(), time.time()
        ok, site, attempts, error = fetch(args, ctx, host, int(port), "/whoami")
        results[i] = (ok, site, attempts, error, time.monotonic() - t0, wall0, time.time())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sites = {}
    for r in results:
        sites[r[1] or "-"] = sites.get(r[1] or "-", 0) + 1
    print(json.dumps({
        "dials": args.clients,
        "ok": sum(1 for r in results if r[0]),
        "seconds": [round(r[4], 3) for r in results],
        "attempts": sum(r[2] for r in results),
        "sites": sites,
        "errors": [r[3] for r in results if not r[0]][:5],
        "results": [[r[5], r[6], r[0], r[1], r[2], r[3]] for r in results],
    }))


if __name__ == "__main__":
    main()
