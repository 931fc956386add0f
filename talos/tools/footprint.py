#!/usr/bin/env python3
"""Measure readyprism's memory and CPU against local fake apiservers (loopback only).

Usage: footprint.py PATH/TO/readyprism [--conns 1000] [--churn 2000]

Starts three fake apiservers (real TLS, one answering /readyz 500), runs `readyprism run`
against them, and prints RSS and CPU for: idle probing, N idle relayed TLS connections,
and M short connections (TLS handshake + one request each) relayed one after the other.
Numbers feed the static pod's resources in talos/README.md. Needs python3 and openssl; the fakes are talos/tools/fakes.py.
"""
import argparse, os, socket, ssl, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fakes import apiserver, make_pki  # noqa: E402

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def sample(pid):
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = int(st[11]) + int(st[12])  # utime + stime
    rss = hwm = 0
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"): rss = int(line.split()[1])
        if line.startswith("VmHWM:"): hwm = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return ticks / os.sysconf("SC_CLK_TCK"), rss, hwm, fds

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary"); ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--churn", type=int, default=2000); ap.add_argument("--idle", type=float, default=60)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="readyprism-footprint-")
    make_pki(d)
    ports = [apiserver(d, 200), apiserver(d, 200), apiserver(d, 500)]
    listen, admin = free_port(), free_port()
    cfg = os.path.join(d, "config.yaml")
    with open(cfg, "w") as f:
        f.write(f'listen: ["127.0.0.1:{listen}"]\nadmin: "127.0.0.1:{admin}"\nzone: a\nbackends:\n'
                f'  - {{ address: "127.0.0.1:{ports[0]}", zone: a }}\n'
                f'  - {{ address: "127.0.0.1:{ports[1]}", zone: b }}\n'
                f'  - {{ address: "127.0.0.1:{ports[2]}", zone: c }}\n'
                f'tls:\n  ca: {d}/ca.crt\n  client_cert: {d}/kubelet.pem\n')
    p = subprocess.Popen([a.binary, "--log-level", "warn", "run", "--config", cfg],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        t0, rss0, _, fd0 = sample(p.pid)
        print(f"start-up: rss {rss0} KiB, fds {fd0}")
        time.sleep(a.idle)
        t1, rss1, _, fd1 = sample(p.pid)
        print(f"idle {a.idle:.0f}s (3 backends probed every 5s): cpu {1000 * (t1 - t0) / a.idle:.2f} ms/s "
              f"({100 * (t1 - t0) / a.idle:.3f}% of a core), rss {rss1} KiB, fds {fd1}")
        cctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        held = []
        for _ in range(a.conns):
            s = cctx.wrap_socket(socket.create_connection(("127.0.0.1", listen)), server_hostname="127.0.0.1")
            held.append(s)
        time.sleep(2)
        t2, rss2, _, fd2 = sample(p.pid)
        print(f"{a.conns} idle relayed TLS connections: rss {rss2} KiB "
              f"(+{(rss2 - rss1) * 1024 / a.conns / 1024:.2f} KiB each), fds {fd2} "
              f"(+{(fd2 - fd1) / a.conns:.2f} each)")
        for s in held: s.close()
        time.sleep(2)
        t3, _, _, _ = sample(p.pid)
        req = b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        w0 = time.monotonic()
        for _ in range(a.churn):
            with cctx.wrap_socket(socket.create_connection(("127.0.0.1", listen)), server_hostname="127.0.0.1") as s:
                s.sendall(req)
                while s.recv(4096): pass
        wall = time.monotonic() - w0
        t4, rss4, hwm4, _ = sample(p.pid)
        print(f"{a.churn} short connections in {wall:.1f}s ({a.churn / wall:.0f}/s): readyprism cpu "
              f"{1000 * (t4 - t3) / a.churn:.3f} ms per connection ({100 * (t4 - t3) / wall:.1f}% of a core "
              f"at that rate); rss {rss4} KiB, peak rss (VmHWM) {hwm4} KiB")
    finally:
        p.terminate(); p.wait(10)

if __name__ == "__main__":
    sys.exit(main())
