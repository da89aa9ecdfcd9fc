#!/usr/bin/env python3
"""Hostile clients against a running relay, and its memory before, during and after.

Issue 14's probe: for SECONDS, CONNECTIONS pickle clients send frames holding one name of
NAME_BYTES (1 MB names inside 1 MB frames), while IDLE connections sit open and a few line
clients send valid datapoints (so queues and destinations work too). The relay's peak RSS
(VmHWM) and its RSS after every client left are read from /proc/PID/status.

    python3 bench/hostile.py --pid PID --pickle 127.0.0.1:2004 --line 127.0.0.1:2003

Prints one JSON object with the figures. Standard library only.
"""
import argparse
import json
import pickle
import socket
import struct
import threading
import time


def addr(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def keep_sending(target, payload, per_payload, deadline, sent):
    """Sends `payload` over and over until `deadline`, reconnecting when closed."""
    while time.time() < deadline:
        try:
            with socket.create_connection(target, timeout=10) as s:
                while time.time() < deadline:
                    s.sendall(payload)
                    sent[0] += per_payload
        except OSError:
            time.sleep(0.05)


def hostile_frame(name_bytes):
    """One pickle frame holding one datapoint whose name is `name_bytes` long."""
    name = "h." + "x" * (name_bytes - 2)
    body = pickle.dumps([(name, (1700000000, 1.0))], protocol=2)
    return struct.pack(">I", len(body)) + body


VALID_LINES = "".join(f"valid.m{i % 1000} {i} 1700000000\n" for i in range(5000)).encode()


def sink(port):
    """A destination that reads and discards everything (pickle or line)."""
    srv = socket.create_server(("127.0.0.1", port))

    def drain(c):
        with c:
            while c.recv(1 << 20):
                pass

    while True:
        c, _ = srv.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True, help="the relay process")
    p.add_argument("--pickle", type=addr, required=True)
    p.add_argument("--line", type=addr, required=True)
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--idle", type=int, default=2000)
    p.add_argument("--valid", type=int, default=4)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--name-bytes", type=int, default=1_000_000)
    p.add_argument("--settle", type=float, default=10, help="seconds to wait after the clients left")
    p.add_argument("--sink", type=int, action="append", default=[],
                   help="also run a discarding destination on this port (repeatable)")
    a = p.parse_args()
    for port in a.sink:
        threading.Thread(target=sink, args=(port,), daemon=True).start()

    before = status(a.pid)
    idle = []
    for _ in range(a.idle):
        try:
            idle.append(socket.create_connection(a.line, timeout=10))
        except OSError:
            break
    deadline = time.time() + a.seconds
    frames, datapoints = [0], [0]
    frame = hostile_frame(a.name_bytes)
    threads = [threading.Thread(target=keep_sending, args=(a.pickle, frame, 1, deadline, frames))
               for _ in range(a.connections)]
    threads += [threading.Thread(target=keep_sending, args=(a.line, VALID_LINES, 5000, deadline, datapoints))
                for _ in range(a.valid)]
    for t in threads:
        t.start()
    peak_seen = 0
    while time.time() < deadline:
        peak_seen = max(peak_seen, status(a.pid).get("VmRSS", 0))
        time.sleep(0.5)
    for t in threads:
        t.join()
    during = status(a.pid)
    for s in idle:
        s.close()
    time.sleep(a.settle)
    after = status(a.pid)
    print(json.dumps({
        "connections": a.connections,
        "idle_connections": len(idle),
        "seconds": a.seconds,
        "name_bytes": a.name_bytes,
        "hostile_frames_sent": frames[0],
        "valid_datapoints_sent": datapoints[0],
        "rss_before_mib": round(before["VmRSS"] / 2**20, 1),
        "rss_peak_mib": round(max(during["VmHWM"], peak_seen) / 2**20, 1),
        "rss_after_clients_left_mib": round(after["VmRSS"] / 2**20, 1),
    }))


if __name__ == "__main__":
    main()
