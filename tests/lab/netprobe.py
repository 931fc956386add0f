#!/usr/bin/env python3
"""Measurements and small clients for the partition lab, run inside a lab namespace
(`ip netns exec NS python3 netprobe.py ...`). Stdlib only; every command prints one JSON line.

  ping IP COUNT [INTERVAL_S] [TIMEOUT_S]
                                  ICMP echo RTTs in ms (raw socket, needs root)
  connect IP PORT COUNT [TIMEOUT] TCP connect (SYN -> SYN-ACK) times in ms
  listen IP PORT                  TCP echo server until killed (prints {"ready": true})
  hold IP PORT SECONDS            one TCP connection, a 1-byte echo every 100 ms for SECONDS;
                                  prints {"connected": true} once connected, then at the end
                                  {"connected", "echoes_ok", "echoes_failed", "error"}
  post URL JSON_BODY TIMEOUT_S    HTTP POST; {"ok", "status", "body", "error", "elapsed_ms"}
"""

import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def ping(ip, count, interval=0.05, timeout=1.0):
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    ident = os.getpid() & 0xFFFF
    rtts, lost = [], 0
    for seq in range(count):
        payload = b"readyprism-lab" + struct.pack("!d", time.time())
        hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, checksum(hdr + payload), ident, seq) + payload
        start = time.monotonic()
        try:
            sock.sendto(pkt, (ip, 0))
        except OSError:  # e.g. EPERM from a local OUTPUT drop: lost
            lost += 1
            time.sleep(interval)
            continue
        got = None
        while got is None:
            left = timeout - (time.monotonic() - start)
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data, _ = sock.recvfrom(2048)
            except socket.timeout:
                break
            ihl = (data[0] & 0x0F) * 4
            kind, _, _, rid, rseq = struct.unpack_from("!BBHHH", data, ihl)
            if kind == 0 and rid == ident and rseq == seq:
                got = (time.monotonic() - start) * 1000.0
        if got is None:
            lost += 1
        else:
            rtts.append(got)
        time.sleep(interval)
    return {"rtt_ms": rtts, "lost": lost}


def connect(ip, port, count, timeout=3.0):
    times, errors = [], []
    for _ in range(count):
        start = time.monotonic()
        try:
            s = socket.create_connection((ip, port), timeout=timeout)
            times.append((time.monotonic() - start) * 1000.0)
            s.close()
        except OSError as e:
            errors.append(str(e))
        time.sleep(0.02)
    return {"connect_ms": times, "errors": errors}


def echo(conn):
    with conn:
        while True:
            data = conn.recv(4096)
            if not data:
                return
            conn.sendall(data)


def listen(ip, port):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ip, port))
    srv.listen(128)
    print(json.dumps({"ready": True}), flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def hold(ip, port, seconds):
    out = {"connected": False, "echoes_ok": 0, "echoes_failed": 0, "error": None}
    try:
        s = socket.create_connection((ip, port), timeout=3.0)
    except OSError as e:
        out["error"] = str(e)
        return out
    out["connected"] = True
    print(json.dumps({"connected": True}), flush=True)
    s.settimeout(1.0)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            s.sendall(b"x")
            if s.recv(1) == b"x":
                out["echoes_ok"] += 1
            else:
                out["echoes_failed"] += 1
        except OSError as e:
            out["echoes_failed"] += 1
            out["error"] = str(e)
        time.sleep(0.1)
    s.close()
    return out


def post(url, body, timeout):
    start = time.monotonic()
    out = {"ok": False, "status": None, "body": None, "error": None}
    try:
        req = urllib.request.Request(url, data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            out["status"] = resp.status
            out["body"] = resp.read().decode(errors="replace")
            out["ok"] = resp.status == 200
    except urllib.error.HTTPError as e:
        out["status"] = e.code
        out["body"] = e.read().decode(errors="replace")
        out["error"] = "HTTP %d" % e.code
    except Exception as e:  # timeout, refused, reset: all are failures with a reason
        out["error"] = "%s: %s" % (type(e).__name__, e)
    out["elapsed_ms"] = (time.monotonic() - start) * 1000.0
    return out


def main(argv):
    cmd = argv[0] if argv else ""
    if cmd == "ping":
        res = ping(argv[1], int(argv[2]), float(argv[3]) if len(argv) > 3 else 0.05,
                   float(argv[4]) if len(argv) > 4 else 1.0)
    elif cmd == "connect":
        res = connect(argv[1], int(argv[2]), int(argv[3]), float(argv[4]) if len(argv) > 4 else 3.0)
    elif cmd == "listen":
        listen(argv[1], int(argv[2]))
        return
    elif cmd == "hold":
        res = hold(argv[1], int(argv[2]), float(argv[3]))
    elif cmd == "post":
        res = post(argv[1], argv[2], float(argv[3]))
    else:
        sys.exit(__doc__)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
