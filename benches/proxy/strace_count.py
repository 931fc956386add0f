#!/usr/bin/env python3
"""Syscalls per proxied connection of the release `readyprism` binary, by syscall, from `strace -c`.

Usage (as root, or with ptrace allowed; needs strace, openssl and python3):

    cargo build --release --locked
    python3 benches/proxy/strace_count.py [--binary target/release/readyprism] [-n 2000] [--json out.json]
    python3 benches/proxy/strace_count.py --haproxy     # the same count for HAProxy (`nbthread 1`)
    python3 benches/proxy/strace_count.py --round-trips 21 [--haproxy]   # per round trip
    python3 benches/proxy/strace_count.py --parallel 16 [--haproxy]      # 16 connections at a time

What it does: writes a CA, a server certificate for 127.0.0.1 and a client certificate with
`openssl`; starts a backend in this script (a TLS ClientHello gets an HTTPS `200` for the probes,
any other first byte is echoed and then the backend closes, as benches/proxy/backend.rs does);
starts the binary with a one-backend config in the shape benches/proxy/targets.rs writes; waits
for `/readyz` = 200 and relays one warm-up connection; then attaches `strace -f -c` to every
thread of the proxy twice:

1. a load window: `-n` short connections made one after the other (connect, 1 byte each way, the
   backend closes first, the client closes);
2. an idle window as long as the load window: the probes', timers' and watchers' background.

Per connection = (load count - idle count x load seconds / idle seconds) / n, per syscall.
With `--round-trips K`, the per-round-trip cost of a kept connection instead (the 1000 x 20 row),
from three windows: `-n` connections of one round trip each (the backend echoes until the client
closes), the idle window as long, and `-n` connections of K round trips; per round trip = (the
K-trip window's count - the 1-trip window's, each less its idle share) / (n x (K - 1)).
With `--haproxy` the proxy measured is HAProxy with the config benches/proxy/targets.rs writes
(no health check, so its idle window is near silent). Prints a table: syscall, per connection,
of which failed (EAGAIN, EINPROGRESS), raw load and idle counts; `--json` also writes the numbers.
"""

import argparse
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pki(d):
    """CA, server (SAN 127.0.0.1) and client certificates; returns (ca, server cert, server key, client pem)."""
    sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
       "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=strace-ca", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
                      ("client", "subjectAltName=DNS:readyprism\nextendedKeyUsage=clientAuth")):
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name, cwd=d)
        sh("openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
           "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext", cwd=d)
    client = os.path.join(d, "client-all.pem")
    with open(client, "w") as out:
        for part in ("client.pem", "client.key"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    j = lambda p: os.path.join(d, p)
    return j("ca.pem"), j("server.pem"), j("server.key"), client


def backend(server_cert, server_key):
    """A listener on 127.0.0.1: TLS (the probes) answered 200, anything else echoed once, then closed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server_cert, server_key)
    ctx.set_alpn_protocols(["http/1.1"])
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1024)

    def probe(conn):
        try:
            with ctx.wrap_socket(conn, server_side=True) as t:
                t.settimeout(5)
                req = b""
                while b"\r\n\r\n" not in req:
                    chunk = t.recv(4096)
                    if not chunk:
                        return
                    req += chunk
                t.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
        except (OSError, ssl.SSLError):
            pass

    def serve():
        while True:
            conn, _ = lst.accept()
            try:
                first = conn.recv(1, socket.MSG_PEEK)
                if first == b"\x16":
                    threading.Thread(target=probe, args=(conn,), daemon=True).start()
                    continue
                data = conn.recv(1)
                conn.sendall(data)
                while data == b"r" and (data := conn.recv(1)):  # round trips until the client closes
                    conn.sendall(data)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return lst.getsockname()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_status(port, path):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            out = b""
            while chunk := s.recv(4096):
                out += chunk
        return int(out.split()[1])
    except (OSError, IndexError, ValueError):
        return None


def until(what, cond, seconds=60):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


def threads_traced(pid):
    """Every thread of `pid` has a tracer."""
    tasks = os.listdir(f"/proc/{pid}/task")
    for t in tasks:
        with open(f"/proc/{pid}/task/{t}/status") as f:
            if re.search(r"^TracerPid:\s+0$", f.read(), re.M):
                return False
    return True


def traced(pid, work, out):
    """Runs `work()` with strace -f -c attached to every thread of `pid`; returns ({syscall: calls}, seconds)."""
    st = subprocess.Popen(["strace", "-f", "-c", "-o", out, "-p", str(pid)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    until("strace to attach", lambda: threads_traced(pid))
    t0 = time.monotonic()
    work()
    seconds = time.monotonic() - t0
    st.send_signal(signal.SIGINT)
    st.wait()
    counts = {}
    with open(out) as f:
        for line in f:
            # % time  seconds  usecs/call  calls  [errors]  syscall
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:(\d+)\s+)?([a-z_0-9]+)\s*$", line)
            if m and m.group(3) != "total":
                counts[m.group(3)] = (int(m.group(1)), int(m.group(2) or 0))
    return counts, seconds


def relays(port):
    try:
        one_connection(port)
        return True
    except (OSError, RuntimeError):
        return False


def one_connection(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"x")
        got = b""
        while chunk := s.recv(16):
            got += chunk
        if got != b"x":
            raise RuntimeError(f"relayed {got!r}, expected b'x'")


def connections(port, n, parallel):
    """`n` connections as `one_connection` makes them, `parallel` at a time."""
    if parallel <= 1:
        for _ in range(n):
            one_connection(port)
        return
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: one_connection(port), range(n)))


def round_trips(port, k):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        for _ in range(k):
            s.sendall(b"r")
            if s.recv(16) != b"r":
                raise RuntimeError("round trip not echoed")


def start_proxy(d, haproxy, binary):
    """Writes a PKI and a config into `d`, starts this script's backend and the proxy measured
    (HAProxy with `haproxy`, else `binary`) with one backend, and waits until it relays (readyprism:
    until its `/readyz` is 200) and has relayed one warm-up connection (the first connection
    allocates what later ones reuse). Returns (process, listen port, log file): terminate the
    process and close the log when done."""
    ca, cert, key, client = pki(d)
    _, bport = backend(cert, key)
    listen, admin = free_port(), free_port()
    if haproxy:
        cfg = os.path.join(d, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("global\n  nbthread 1\n  maxconn 9000\n"
                    "defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 10m\n"
                    "  timeout server 10m\n"
                    f"frontend fe\n  bind 127.0.0.1:{listen}\n  backlog 1024\n  default_backend be\n"
                    f"backend be\n  server s1 127.0.0.1:{bport}\n")
        command = ["haproxy", "-db", "-f", cfg]
    else:
        cfg = os.path.join(d, "readyprism.yaml")
        with open(cfg, "w") as f:
            f.write(f'listen: ["127.0.0.1:{listen}"]\nadmin: "127.0.0.1:{admin}"\n'
                    f"tls:\n  ca: {ca}\n  client_cert: {client}\n"
                    f'backends:\n  - address: "127.0.0.1:{bport}"\n')
        command = [binary, "--log-level", "warn", "run", "--config", cfg]
    log = open(os.path.join(d, "proxy.log"), "w")
    rp = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        if haproxy:
            until("HAProxy to relay", lambda: relays(listen))
        else:
            until("/readyz 200", lambda: http_status(admin, "/readyz") == 200)
        one_connection(listen)
    except BaseException:
        rp.terminate()
        rp.wait()
        log.close()
        raise
    return rp, listen, log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/readyprism"))
    ap.add_argument("-n", type=int, default=2000, help="connections in the load window")
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--haproxy", action="store_true", help="measure HAProxy instead")
    ap.add_argument("--round-trips", type=int, default=0, metavar="K",
                    help="count per round trip of connections making K (> 1) round trips")
    ap.add_argument("--parallel", type=int, default=1, metavar="P",
                    help="make the load window's connections P at a time (threads), as the bench's churn does")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="strace-count-") as d:
        rp, listen, log = start_proxy(d, args.haproxy, args.binary)
        try:
            if args.round_trips > 1:
                # The 1-trip window stands in for the load window: it is what the K-trip one less.
                k = args.round_trips
                one, one_s = traced(rp.pid, lambda: [round_trips(listen, 1) for _ in range(args.n)],
                                    os.path.join(d, "one.strace"))
                idle, idle_s = traced(rp.pid, lambda: time.sleep(one_s), os.path.join(d, "idle.strace"))
                many, many_s = traced(rp.pid, lambda: [round_trips(listen, k) for _ in range(args.n)],
                                      os.path.join(d, "many.strace"))
            else:
                load, load_s = traced(rp.pid, lambda: connections(listen, args.n, args.parallel),
                                      os.path.join(d, "load.strace"))
                idle, idle_s = traced(rp.pid, lambda: time.sleep(load_s), os.path.join(d, "idle.strace"))
        finally:
            rp.terminate()
            rp.wait()
            log.close()
        if args.round_trips > 1:
            # Each window less the idle background, then the K-trip window less the 1-trip one.
            one_net = {k_: v[0] - idle.get(k_, (0, 0))[0] * one_s / idle_s for k_, v in one.items()}
            many_net = {k_: v[0] - idle.get(k_, (0, 0))[0] * many_s / idle_s for k_, v in many.items()}
            trips = args.n * (args.round_trips - 1)
            rows = sorted(((name, (many_net.get(name, 0) - one_net.get(name, 0)) / trips)
                           for name in set(one_net) | set(many_net)), key=lambda r: (-round(r[1], 2), r[0]))
            print(f"{args.n} connections of {args.round_trips} round trips in {many_s:.2f} s, "
                  f"of 1 in {one_s:.2f} s; per round trip beyond the first:")
            total = 0.0
            for name, per in rows:
                total += per
                if abs(per) >= 0.01:
                    print(f"{name:<18} {per:>9.2f}")
            print(f"{'total':<18} {total:>9.2f}")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"n": args.n, "round_trips": args.round_trips,
                               "per_round_trip": dict(rows)}, f, indent=1)
            return
        scale = load_s / idle_s
        zero = (0, 0)
        rows = []
        for name in sorted(set(load) | set(idle)):
            (lc, le), (ic, ie) = load.get(name, zero), idle.get(name, zero)
            per = (lc - ic * scale) / args.n
            errors = (le - ie * scale) / args.n
            rows.append((name, per, errors, lc, ic))
        rows.sort(key=lambda r: (-round(r[1], 2), r[0]))
        print(f"{args.n} connections in {load_s:.2f} s; idle window {idle_s:.2f} s")
        print(f"{'syscall':<18} {'per conn':>9} {'of which errors':>16} {'load':>8} {'idle':>6}")
        total = other = 0.0
        for name, per, errors, lc, ic in rows:
            total += per
            if abs(per) < 0.01:
                other += per  # the background's noise: thread starts, timers, the config watch
                continue
            print(f"{name:<18} {per:>9.2f} {errors:>16.2f} {lc:>8} {ic:>6}")
        print(f"{'(others, < 0.01)':<18} {other:>9.2f}")
        print(f"{'total':<18} {total:>9.2f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"n": args.n, "load_seconds": load_s, "idle_seconds": idle_s,
                           "per_connection": {r[0]: r[1] for r in rows},
                           "errors_per_connection": {r[0]: r[2] for r in rows},
                           "load": load, "idle": idle}, f, indent=1)


if __name__ == "__main__":
    main()
