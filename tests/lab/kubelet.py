#!/usr/bin/env python3
"""A kubelet-like client for the partition lab, run in the node's namespace
(`ip netns exec NS python3 kubelet.py ...`). Stdlib only. Until killed it:

  - holds one long-lived `GET /watch` stream through the balancer (mutual TLS, HTTP/1.1 chunked;
    the simulated apiserver sends a line naming its site every 250 ms) and re-dials it at once
    when it ends, as a watch does;
  - makes one `GET /whoami` every PERIOD seconds, one at a time, each on a new connection (a new
    pick by the balancer), next start = max(previous start + PERIOD, previous end).

A GET that dies with EOF or a reset before its answer is retried after 1 s, up to 3 attempts in
all, as client-go retries GETs (`IsConnectionReset`/`IsProbableEOF` in `rest.Request`, with an
artificial `Retry-After: 1`): the balancer closing a connection to a backend that turned unready
is not an error a kubelet sees.
A timeout (TIMEOUT seconds per attempt) or a non-200 answer is not retried: that is an error.

It also renews a node lease as kubelet's lease controller does (`pkg/kubelet` heartbeat client:
timeout = min(nodeStatusUpdateFrequency 10 s, lease duration 40 s) = 10 s; `retryUpdateLease`: up
to 5 attempts back to back, closing every connection after the second failure): every LEASE_EVERY
seconds after the previous round ended, `PUT /apis/coordination.k8s.io/v1/namespaces/
kube-node-lease/leases/<node>` on one kept-alive connection, as client-go's HTTP/2 transport keeps
one. A timed-out attempt leaves that connection in place for the next attempt (an HTTP/2 stream
times out, not its connection); an EOF, reset or error closes it and the next attempt dials anew.

With --slow, a third thread calls `GET /slow` (answered after 2 s) back to back on new
connections, so that one request is always in flight, with the GETs' retries.

Every result is one JSON line appended to OUT, flushed at once, stamped with the wall clock
(`time.time()`, the clock the test's fault marks use):

  {"ev": "req", "t0", "t1", "ok", "site", "attempts", "error"}       one per request
  {"ev": "line", "t", "c", "site"}                                    one per stream event
  {"ev": "end", "t", "c", "reason"}                                   a stream connection ended
  {"ev": "dial_error", "t", "c", "error"}                             a stream dial failed
  {"ev": "lease", "t0", "t1", "ok", "site", "attempt", "conn", "error"} one per lease attempt
  {"ev": "slow", "t0", "t1", "ok", "site", "attempts", "error"}       one per `/slow` request

  kubelet.py --server 127.0.0.1:7445 --ca CA.pem --cert KUBELET.pem --out OUT.jsonl
             [--period 0.2] [--timeout 10] [--silence 30] [--node NAME] [--slow]
"""

import argparse
import json
import re
import socket
import ssl
import threading
import time

SITE = re.compile(rb'"from":"([A-Za-z0-9_.-]+)"')
LEASE_EVERY = 10.0  # renewInterval: 0.25 x the 40 s lease duration
LEASE_TIMEOUT = 10.0  # the heartbeat client's timeout
LEASE_ATTEMPTS = 5  # maxUpdateRetries
RETRYABLE = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, ssl.SSLEOFError,
             ssl.SSLZeroReturnError, EOFError)


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **event):
        line = json.dumps(event, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


def context(ca, cert):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(ca)
    ctx.load_cert_chain(cert)  # kubelet-client-current.pem: certificate and key in one file
    return ctx


def dial(ctx, host, port, timeout):
    raw = socket.create_connection((host, port), timeout=timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise


def read_answer(sock, deadline):
    """Reads one HTTP/1.1 answer with a Content-Length (the lease's): (status, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += recv_by(sock, deadline)
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    length = int(m.group(1)) if m else 0
    while len(body) < length:
        body += recv_by(sock, deadline)
    return int(head.split(b" ", 2)[1]), body[:length].decode(errors="replace")


def recv_by(sock, deadline):
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    sock.settimeout(left)
    chunk = sock.recv(65536)
    if not chunk:
        raise EOFError("connection closed before an answer")
    return chunk


def lease(args, ctx, log, host, port):
    """Kubelet's node lease: a round of up to 5 attempts every LEASE_EVERY s (see the top)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{args.node}"
    body = json.dumps({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
                       "metadata": {"name": args.node, "namespace": "kube-node-lease"},
                       "spec": {"holderIdentity": args.node, "leaseDurationSeconds": 40}})
    req = (f"PUT {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
    sock = None
    while True:
        for attempt in range(1, LEASE_ATTEMPTS + 1):
            t0, conn, site, error = time.time(), "reused", None, None
            try:
                if sock is None:
                    conn = "new"
                    sock = dial(ctx, host, port, LEASE_TIMEOUT)
                deadline = time.monotonic() + LEASE_TIMEOUT - (time.time() - t0)
                sock.sendall(req)
                status, answer = read_answer(sock, deadline)
                if status == 200:
                    m = SITE.search(answer.encode())
                    site = m.group(1).decode() if m else None
                else:
                    error = f"HTTP {status}: {answer[:200]}"
            except TimeoutError as e:
                error = describe(e)  # the HTTP/2 stream timed out; its connection stays
            except Exception as e:
                error = describe(e)
                sock = close(sock)
            if error is not None and attempt >= 2:
                sock = close(sock)  # onRepeatedHeartbeatFailure: closeAllConns
            log.write(ev="lease", t0=t0, t1=time.time(), ok=error is None, site=site,
                      attempt=attempt, conn=conn, error=error)
            if error is None:
                break
        time.sleep(LEASE_EVERY)


def close(sock):
    if sock is not None:
        sock.close()
    return None


def slow(args, ctx, log, host, port):
    """`GET /slow` back to back, each held 2 s by the apiserver: one always in flight."""
    while True:
        t0 = time.time()
        ok, site, attempts, error = fetch(args, ctx, host, port, "/slow")
        log.write(ev="slow", t0=t0, t1=time.time(), ok=ok, site=site, attempts=attempts,
                  error=error)


def get_once(ctx, host, port, path, timeout):
    """One GET on a new connection: (status, body). Raises on failure."""
    deadline = time.monotonic() + timeout
    sock = dial(ctx, host, port, timeout)
    try:
        req = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
        sock.sendall(req.encode())
        data = b""
        while True:
            try:
                data += recv_by(sock, deadline)
            except EOFError:
                break
    finally:
        sock.close()
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        raise EOFError(f"connection closed after {len(data)} bytes, before an answer")
    status = int(head.split(b" ", 2)[1])
    return status, body.decode(errors="replace").strip()


def describe(e):
    return f"{type(e).__name__}: {e}"


def fetch(args, ctx, host, port, path):
    """A GET with client-go's retries: (ok, site, attempts, error)."""
    attempts, site, error, ok = 0, None, None, False
    while attempts < 3:
        if attempts:
            time.sleep(1.0)  # client-go's artificial Retry-After: 1
        attempts += 1
        try:
            status, body = get_once(ctx, host, port, path, args.timeout)
        except RETRYABLE as e:
            error = describe(e)
            continue  # client-go retries a GET that died with EOF or a reset
        except Exception as e:  # timeouts, refused, TLS verification: not retried
            error = describe(e)
            break
        if status == 200:
            ok, site, error = True, body, None
        else:
            error = f"HTTP {status}: {body[:200]}"
        break
    return ok, site, attempts, error


def requests(args, ctx, log, host, port):
    start = time.time()
    while True:
        t0 = time.time()
        ok, site, attempts, error = fetch(args, ctx, host, port, "/whoami")
        log.write(ev="req", t0=t0, t1=time.time(), ok=ok, site=site, attempts=attempts,
                  error=error)
        start = max(start + args.period, time.time())
        time.sleep(max(0.0, start - time.time()))


def watch(args, ctx, log, host, port):
    c = 0
    while True:
        c += 1
        try:
            sock = dial(ctx, host, port, args.timeout)
        except Exception as e:
            log.write(ev="dial_error", t=time.time(), c=c, error=describe(e))
            time.sleep(0.1)
            continue
        reason = "EOF"
        try:
            sock.sendall(f"GET /watch HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            sock.settimeout(args.silence)  # kubelet's HTTP/2 health check gives up after ~45 s
            buf = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                now = time.time()
                buf += chunk
                last = 0
                for m in SITE.finditer(buf):
                    log.write(ev="line", t=now, c=c, site=m.group(1).decode())
                    last = m.end()
                buf = buf[last:][-4096:]
        except socket.timeout:
            reason = f"silent for {args.silence:g} s"
        except Exception as e:
            reason = describe(e)
        finally:
            sock.close()
        log.write(ev="end", t=time.time(), c=c, reason=reason)
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server", default="127.0.0.1:7445")
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--period", type=float, default=0.2)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--silence", type=float, default=30.0)
    p.add_argument("--node", default="node")
    p.add_argument("--slow", action="store_true")
    args = p.parse_args()
    host, port = args.server.rsplit(":", 1)
    ctx = context(args.ca, args.cert)
    log = Log(args.out)
    threading.Thread(target=watch, args=(args, ctx, log, host, int(port)), daemon=True).start()
    threading.Thread(target=lease, args=(args, ctx, log, host, int(port)), daemon=True).start()
    if args.slow:
        threading.Thread(target=slow, args=(args, ctx, log, host, int(port)), daemon=True).start()
    requests(args, ctx, log, host, int(port))


if __name__ == "__main__":
    main()
