#!/usr/bin/env python3
"""Throughput of one TCP stream between two hosts of the local cluster, in Mbit/s as the receiver
counts it: `link_throughput.py serve` on one host, `link_throughput.py send ADDRESS MIB` on the other
(prints the rate)."""
import socket, sys, time
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7071)); s.listen(1)
    c, _ = s.accept(); n = 0
    while True:
        d = c.recv(1 << 16)
        if not d: break
        n += len(d)
    c.sendall(str(n).encode()); c.close()
elif sys.argv[1] == "send":
    c = socket.create_connection((sys.argv[2], 7071)); data = b"x" * (1 << 20); t = time.perf_counter()
    for _ in range(int(sys.argv[3])): c.sendall(data)
    c.shutdown(socket.SHUT_WR); got = int(c.recv(64)); dt = time.perf_counter() - t
    print(f"{got * 8 / dt / 1e6:.1f}")
