#!/usr/bin/env python3
"""What a compressed link costs: relay A (plaintext in, a `line` destination with
`destinations.compression`) feeding relay B (`listen.line_tcp_compression`, plaintext out to a
sink), for each transport and plain, in one run. Prints each process's CPU seconds (from
/proc/<pid>/stat) per million datapoints and the bytes A wrote on the link (/proc/<pid>/io).

Usage: bench/compression.py [--bin target/release/anthracite] [--lines 1000000]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from procs import cpu, free_port

KINDS = ["plain", "gzip", "lz4", "snappy", "zstd"]
class Forwarder:
    """Copies one port to another, counting the bytes."""

    def __init__(self, to_port):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.to_port = to_port
        self.bytes = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            conn, _ = self.sock.accept()
            out = socket.create_connection(("127.0.0.1", self.to_port))
            threading.Thread(target=self.copy, args=(conn, out), daemon=True).start()

    def copy(self, conn, out):
        while True:
            data = conn.recv(1 << 20)
            if not data:
                out.close()
                return
            with self.lock:
                self.bytes += len(data)
            out.sendall(data)


class Sink:
    """Counts the lines it receives."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.lines = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self.read, args=(conn,), daemon=True).start()

    def read(self, conn):
        while True:
            data = conn.recv(1 << 20)
            if not data:
                return
            with self.lock:
                self.lines += data.count(b"\n")


def start(binary, dir, name, toml, port):
    path = os.path.join(dir, f"{name}.toml")
    with open(path, "w") as f:
        f.write(toml)
    log = open(os.path.join(dir, f"{name}.log"), "w")
    p = subprocess.Popen([binary, "run", "--config", path], stdout=log, stderr=log)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit(f"{name} does not listen on {port}")


def run(binary, kind, payload, n, sink):
    dir = tempfile.mkdtemp(prefix=f"compression-{kind}-")
    a_port, b_port = free_port(), free_port()
    b = start(binary, dir, "b", f"""[listen]
line_tcp = "127.0.0.1:{b_port}"
pickle_tcp = ""
line_tcp_compression = "{kind}"
[destinations]
servers = ["127.0.0.1:{sink.port}"]
protocol = "line"
""", b_port)
    link = Forwarder(b_port)
    a = start(binary, dir, "a", f"""[listen]
line_tcp = "127.0.0.1:{a_port}"
pickle_tcp = ""
[destinations]
servers = ["127.0.0.1:{link.port}"]
protocol = "line"
compression = "{kind}"
""", a_port)
    before = (cpu(a.pid), cpu(b.pid), 0, sink.lines)
    start_time = time.time()
    with socket.create_connection(("127.0.0.1", a_port)) as s:
        s.sendall(payload)
    while sink.lines - before[3] < n and time.time() - start_time < 60:
        time.sleep(0.05)
    got = sink.lines - before[3]
    after = (cpu(a.pid), cpu(b.pid), link.bytes)
    for p in (a, b):
        p.terminate()
        p.wait()
    per_m = 1e6 / n
    return got, (after[0] - before[0]) * per_m, (after[1] - before[1]) * per_m, (after[2] - before[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/anthracite")
    ap.add_argument("--lines", type=int, default=1_000_000)
    args = ap.parse_args()
    n = args.lines
    payload = b"".join(
        b"servers.host%03d.cpu.cpu%d.user %d.25 %d\n" % (i % 500, i % 8, i % 1000, 1_700_000_000 + i // 1000)
        for i in range(n)
    )
    sink = Sink()
    print(f"{n} lines, {len(payload) / 1e6:.1f} MB of plaintext")
    print("| link | A (compresses) CPU-s per 1M | B (decompresses) CPU-s per 1M | bytes on the link | delivered |")
    print("|---|---|---|---|---|")
    for kind in KINDS:
        got, a, b, w = run(args.bin, kind, payload, n, sink)
        print(f"| {kind} | {a:.3f} | {b:.3f} | {w / 1e6:.1f} MB | {got} |")


if __name__ == "__main__":
    main()
