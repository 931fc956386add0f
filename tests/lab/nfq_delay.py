#!/usr/bin/env python3
"""Userspace packet delay for the partition lab: an NFQUEUE verdict helper.

The kernel here has no `netem`, so each lab namespace sends the packets arriving over its far
links to an iptables NFQUEUE (`INPUT ... -j NFQUEUE --queue-num N --queue-bypass`), and this
process holds every packet of queue N for a fixed delay, then accepts it. Because it works on
packets, TCP handshakes, ICMP and everything else on the link are delayed too (a TCP delay proxy
would only delay payload). Queue on arrival, not in OUTPUT: a packet held there still counts
against its socket, and TCP Small Queues then throttle a far link to a few packets per delay.

Usage: nfq_delay.py --queue NUM:DELAY_MS [--queue NUM:DELAY_MS ...]
Prints "ready" on stdout once every queue is bound, then runs until SIGTERM or SIGINT, or, when
stdin is a pipe, until it reaches EOF (the test process that holds its write end died).

Design, kept small on purpose (stdlib only, raw nfnetlink_queue over AF_NETLINK):
- One netlink socket bound to every queue; copy mode META (no payload is copied to userspace, the
  verdict accepts the original packet), GSO packets are queued whole.
- Per queue the delay is fixed, so packets are due in arrival order: a FIFO per queue, and a single
  VERDICT_BATCH ("accept every packet with id <= N") releases all due packets at once. Nothing is
  reordered beyond what a fixed delay gives, bursts cost one verdict per wake-up, and a packet whose
  queue message we never saw (receive buffer overflow) is still released by the next batch.
- Fail-safe: the rules use --queue-bypass (no helper bound = packets pass undelayed, so a dead
  helper never wedges a test) and the queue is configured FAIL_OPEN (queue full = accept).
"""

import os
import select
import signal
import socket
import stat
import struct
import sys
import time
from collections import deque

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET = 0
NFQNL_MSG_CONFIG = 2
NFQNL_MSG_VERDICT_BATCH = 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQA_CFG_CMD = 1
NFQA_CFG_PARAMS = 2
NFQA_CFG_QUEUE_MAXLEN = 3
NFQA_CFG_MASK = 4
NFQA_CFG_FLAGS = 5
NFQNL_CFG_CMD_BIND = 1
NFQNL_COPY_META = 1
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_CFG_F_GSO = 4
NF_ACCEPT = 1
NLM_F_REQUEST = 1
NLM_F_ACK = 4
NLMSG_ERROR = 2
SO_RCVBUFFORCE = 33
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
QUEUE_MAXLEN = 65536


def attr(kind, payload):
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def message(msg, queue, attrs, flags=NLM_F_REQUEST, seq=0):
    # nfgenmsg: family AF_UNSPEC, version 0, res_id = queue number (big endian)
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + b"".join(attrs)
    kind = (NFNL_SUBSYS_QUEUE << 8) | msg
    return struct.pack("=IHHII", 16 + len(body), kind, flags, seq, 0) + body


def parse_attrs(data, offset):
    out = {}
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    return out


def configure(sock, queue, seq):
    """Bind one queue; raises OSError with the kernel's errno on failure."""
    msgs = [
        message(NFQNL_MSG_CONFIG, queue,
                [attr(NFQA_CFG_CMD, struct.pack("!BBH", NFQNL_CFG_CMD_BIND, 0, socket.AF_INET))],
                NLM_F_REQUEST | NLM_F_ACK, seq),
        message(NFQNL_MSG_CONFIG, queue,
                [attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0xFFFF, NFQNL_COPY_META)),
                 attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)),
                 attr(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO)),
                 attr(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_GSO))],
                NLM_F_REQUEST | NLM_F_ACK, seq + 1),
    ]
    for m in msgs:
        sock.send(m)
        while True:
            data = sock.recv(65536)
            length, kind = struct.unpack_from("=IH", data, 0)
            if kind == NLMSG_ERROR:
                (err,) = struct.unpack_from("=i", data, 16)
                if err != 0:
                    raise OSError(-err, "nfqueue config of queue %d: %s" % (queue, os.strerror(-err)))
                break


def main(argv):
    delays = {}
    args = iter(argv)
    for a in args:
        if a == "--queue":
            num, ms = next(args).split(":")
            delays[int(num)] = float(ms) / 1000.0
        else:
            sys.exit("usage: nfq_delay.py --queue NUM:DELAY_MS [...]")
    if not delays:
        sys.exit("usage: nfq_delay.py --queue NUM:DELAY_MS [...]")

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    seq = 1
    for q in delays:
        configure(sock, q, seq)
        seq += 2
    sock.setblocking(False)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    print("ready", flush=True)

    pending = {q: deque() for q in delays}  # queue -> deque of (due, packet_id)
    # Exit when the test process goes away: it holds the write end of our stdin pipe.
    stdin = sys.stdin.fileno()
    watch = [sock, stdin] if stat.S_ISFIFO(os.fstat(stdin).st_mode) else [sock]
    while not stop:
        now = time.monotonic()
        due = [d[0][0] for d in pending.values() if d]
        timeout = max(0.0, min(due) - now) if due else None
        try:
            ready, _, _ = select.select(watch, [], [], timeout)
        except InterruptedError:
            continue
        if stdin in ready:
            if not os.read(stdin, 4096):
                break
        if sock in ready:
            while True:
                try:
                    data = sock.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # ENOBUFS despite NO_ENOBUFS: the next batch verdict covers it
                    continue
                arrived = time.monotonic()
                off = 0
                while off + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, off)
                    if length < 16:
                        break
                    if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                        (queue,) = struct.unpack_from("!H", data, off + 18)
                        hdr = parse_attrs(data[off : off + length], 20).get(NFQA_PACKET_HDR)
                        if hdr is not None and queue in pending:
                            (pid,) = struct.unpack_from("!I", hdr, 0)
                            pending[queue].append((arrived + delays[queue], pid))
                    off += (length + 3) & ~3
        now = time.monotonic()
        for queue, fifo in pending.items():
            last = None
            while fifo and fifo[0][0] <= now:
                last = fifo.popleft()[1]
            if last is not None:
                verdict = attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, last))
                while True:
                    try:
                        sock.send(message(NFQNL_MSG_VERDICT_BATCH, queue, [verdict]))
                        break
                    except (BlockingIOError, InterruptedError):
                        select.select([], [sock], [], 0.01)
    # Closing the socket unbinds the queues; with --queue-bypass traffic then flows undelayed.
    sock.close()


if __name__ == "__main__":
    main(sys.argv[1:])
