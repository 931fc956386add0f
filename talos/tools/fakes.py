#!/usr/bin/env python3
"""Test doubles for the deployment checks: a throwaway PKI, fake apiservers and a tiny DNS server.

Loopback only. Used by .ci/image-check (DNS-named backends inside the image) and footprint.py.

  fakes.py serve DIR [--apiserver STATUS ...] [--dns ADDR]

writes DIR/ca.crt, DIR/kubelet.pem (client cert + key, as the kubelet's
kubelet-client-current.pem), then serves: each apiserver answers HTTPS on 127.0.0.1 (a free port)
with /readyz -> STATUS (200 or e.g. 500) and everything else -> 200, and prints one line
"ready PORT..." with the apiservers' ports in order; the DNS server answers A queries
for names under fake.test with 127.0.0.1 (UDP, ADDR:53; NXDOMAIN for other names). Runs until
killed. Needs python3 and openssl.
"""
import argparse, http.server, os, socket, ssl, struct, subprocess, sys, threading

SAN = "subjectAltName=DNS:localhost,DNS:api.fake.test,IP:127.0.0.1"

def _sh(*a, cwd):
    subprocess.run(a, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def make_pki(d):
    """A CA, an apiserver cert (localhost, api.fake.test, 127.0.0.1) and a kubelet-style client PEM."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _sh("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=fake-cluster-ca", cwd=d)
    for name, subj, ext in [("srv", "/CN=kube-apiserver", SAN),
                            ("cl", "/O=system:nodes/CN=system:node:fake", "extendedKeyUsage=clientAuth")]:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext + "\n")
        _sh("openssl", "req", *ec, "-keyout", name + ".key", "-out", name + ".csr", "-subj", subj, cwd=d)
        _sh("openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", name + ".crt", "-days", "2", "-extfile", name + ".ext", cwd=d)
    with open(os.path.join(d, "kubelet.pem"), "w") as f:
        f.write(open(os.path.join(d, "cl.crt")).read() + open(os.path.join(d, "cl.key")).read())

def apiserver(d, status, port=0):
    """Starts a fake apiserver thread on 127.0.0.1:port; returns the bound port."""
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            code = status if self.path.startswith("/readyz") else 200
            body = b"ok" if code == 200 else b"[-]etcd failed: reason withheld"
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "srv.crt"), os.path.join(d, "srv.key"))
    ctx.load_verify_locations(os.path.join(d, "ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 2048
        def get_request(self):  # TLS handshake in the handler thread, not in the accept loop
            sock, addr = self.socket.accept()
            return ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr
    srv = Server(("127.0.0.1", port), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]

def dns(addr):
    """Serves A records for *.fake.test -> 127.0.0.1 on UDP addr:53 in a thread."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 53))
    def loop():
        while True:
            data, peer = s.recvfrom(512)
            try:
                i, labels = 12, []
                while data[i]:
                    labels.append(data[i + 1:i + 1 + data[i]].decode()); i += 1 + data[i]
                qtype = struct.unpack(">H", data[i + 1:i + 3])[0]
                name = ".".join(labels).lower()
                ours = name == "fake.test" or name.endswith(".fake.test")
                ans = b""
                if ours and qtype == 1:
                    ans = b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 30, 4) + socket.inet_aton("127.0.0.1")
                flags = 0x8180 | (0 if ours else 3)
                hdr = data[:2] + struct.pack(">HHHHH", flags, 1, 1 if ans else 0, 0, 0)
                s.sendto(hdr + data[12:i + 5] + ans, peer)
            except (IndexError, struct.error):
                continue
    threading.Thread(target=loop, daemon=True).start()

def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sv = sub.add_parser("serve")
    sv.add_argument("dir")
    sv.add_argument("--apiserver", action="append", default=[], type=int, metavar="STATUS")
    sv.add_argument("--dns", metavar="ADDR")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    make_pki(a.dir)
    ports = [apiserver(a.dir, status) for status in a.apiserver]
    if a.dns:
        dns(a.dns)
    print("ready", *ports, flush=True)
    threading.Event().wait()

if __name__ == "__main__":
    sys.exit(main())
