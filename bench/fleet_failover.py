#!/usr/bin/env python3
"""Failover timings of a relay fleet sharing one Kinesis stream through a DynamoDB lease table.

Real processes: DynamoDB Local (as installed by `cargo test --test kinesis_leases` under
target/tmp/dynamodb-local), kinesalite (crates/anthracite-testkit/servers/kinesalite), three `anthracite` relays with the
default lease settings, a plaintext sink, and a producer writing one record per shard every
50 ms (each record carries its put time). One relay is stopped with SIGKILL or SIGTERM; the
script reports, per shard it held, when a survivor owned the lease and when a record of that
shard was delivered again, counted from the signal.

Standard library only (the local servers accept any signature).

    cargo build && cargo test --test kinesis_leases --no-run   # binary + DynamoDB Local
    (cd crates/anthracite-testkit/servers/kinesalite && npm ci)
    python3 bench/fleet_failover.py --signal KILL --runs 3
"""

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from procs import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDB_DIR = os.path.join(ROOT, "target/tmp/dynamodb-local")
AUTH = "AWS4-HMAC-SHA256 Credential=AKIDTEST/20250101/us-east-1/{service}/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"


def call(endpoint, target, body, json_version, service):
    req = urllib.request.Request(
        endpoint,
        data=json.dumps(body).encode(),
        headers={
            "X-Amz-Target": target,
            "Content-Type": f"application/x-amz-json-{json_version}",
            "X-Amz-Date": "20250101T000000Z",
            "Authorization": AUTH.format(service=service),
        },
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"{}")


def kinesis(endpoint, op, body):
    return call(endpoint, f"Kinesis_20131202.{op}", body, "1.1", "kinesis")


def scan(endpoint, table):
    try:
        return call(endpoint, "DynamoDB_20120810.Scan", {"TableName": table, "ConsistentRead": True}, "1.0", "dynamodb")["Items"]
    except Exception:
        return []


def wait_port(port, what, proc, limit=120):
    end = time.time() + limit
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{what} exited")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"{what} did not listen")


class Sink:
    """Plaintext sink: records (name, value, arrival time)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.got = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            c, _ = self.sock.accept()
            threading.Thread(target=self.read, args=(c,), daemon=True).start()

    def read(self, c):
        buf = b""
        while True:
            data = c.recv(65536)
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            now = time.time()
            with self.lock:
                for line in lines:
                    parts = line.split()
                    if len(parts) == 3:
                        self.got.append((parts[0].decode(), float(parts[1]), now))


def run(args, run_no):
    tmp = tempfile.mkdtemp(prefix="fleet-failover-")
    procs = []
    try:
        dport, kport = free_port(), free_port()
        ddb = subprocess.Popen(
            ["java", f"-Dsqlite4java.library.path={DDB_DIR}/lib", "-Xmx256m", "-cp",
             f"{DDB_DIR}/classes:{DDB_DIR}/lib/*", "LoopbackDynamoDbLocal",
             "-port", str(dport), "-inMemory", "-sharedDb", "-disableTelemetry"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(ddb)
        kin = subprocess.Popen(["node", os.path.join(ROOT, "crates/anthracite-testkit/servers/kinesalite/start.js"), str(kport)],
                               cwd=os.path.join(ROOT, "crates/anthracite-testkit/servers/kinesalite"), stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL)
        procs.append(kin)
        wait_port(dport, "DynamoDB Local", ddb)
        wait_port(kport, "kinesalite", kin)
        ddb_url, kin_url = f"http://127.0.0.1:{dport}", f"http://127.0.0.1:{kport}"
        kinesis(kin_url, "CreateStream", {"StreamName": "fleet", "ShardCount": 6})
        time.sleep(1)
        shards = kinesis(kin_url, "ListShards", {"StreamName": "fleet"})["Shards"]
        sink = Sink()
        env = dict(os.environ, AWS_ACCESS_KEY_ID="AKIDTEST", AWS_SECRET_ACCESS_KEY="secret",
                   AWS_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", RUST_LOG="warn")
        relays = {}
        for w in ["r0", "r1", "r2"]:
            cfg = os.path.join(tmp, f"{w}.toml")
            with open(cfg, "w") as f:
                f.write(f"""[listen]
line_tcp = ""
pickle_tcp = ""
[destinations]
servers = ["127.0.0.1:{sink.port}:a"]
protocol = "line"
[telemetry]
interval_secs = 0
[[kinesis]]
stream = "fleet"
endpoint_url = "{kin_url}"
lease_table = "fleet-leases"
dynamodb_endpoint_url = "{ddb_url}"
worker_id = "{w}"
lease_duration_secs = {args.lease}
""")
            relays[w] = subprocess.Popen([args.binary, "run", "--config", cfg], env=env,
                                         stderr=open(os.path.join(tmp, f"{w}.log"), "w"))
            procs.append(relays[w])

        def owners():
            return {i["leaseKey"]["S"]: i.get("leaseOwner", {}).get("S") for i in scan(ddb_url, "fleet-leases")}

        # Settled: two leases each, unchanged for two lease durations.
        stable_since, last = None, None
        while True:
            o = owners()
            counts = sorted(list(o.values()).count(w) for w in relays)
            if counts == [2, 2, 2] and o == last:
                if time.time() - stable_since > 2 * args.lease:
                    break
            else:
                stable_since = time.time()
            last = o
            time.sleep(0.2)

        stop = threading.Event()

        def produce():
            n = 0
            while not stop.is_set():
                for s in shards:
                    key = s["HashKeyRange"]["StartingHashKey"]
                    data = f"f.{s['ShardId']} {time.time():.3f} 1700000000\n".encode()
                    kinesis(kin_url, "PutRecord", {"StreamName": "fleet", "PartitionKey": "p",
                                                  "ExplicitHashKey": key,
                                                  "Data": base64.b64encode(data).decode()})
                    n += 1
                time.sleep(0.05)

        threading.Thread(target=produce, daemon=True).start()
        time.sleep(3 * args.lease)
        held = [k for k, w in owners().items() if w == "r2"]
        t0 = time.time()
        relays["r2"].send_signal(signal.SIGKILL if args.signal == "KILL" else signal.SIGTERM)
        relays["r2"].wait()
        t_exit = time.time() - t0
        taken = {}
        while len(taken) < len(held) and time.time() - t0 < 10 * args.lease:
            o = owners()
            for k in held:
                if k not in taken and o.get(k) not in (None, "r2"):
                    taken[k] = (time.time() - t0, o[k])
            time.sleep(0.05)
        time.sleep(3 * args.lease)
        stop.set()
        with sink.lock:
            got = list(sink.got)
        for k in held:
            # Records of this shard put after the signal: delay from put to delivery.
            after = [(put, arr) for name, put, arr in got if name == f"f.{k}" and put > t0]
            first = min((arr for _, arr in after), default=None)
            worst = max((arr - put for put, arr in after), default=None)
            print(f"run {run_no} {args.signal}: {k} r2 exited after {t_exit:.2f}s; lease owned by "
                  f"{taken.get(k, (None, '?'))[1]} after {taken.get(k, (float('nan'),))[0]:.2f}s; "
                  f"first record put after the signal delivered at {first - t0 if first else float('nan'):.2f}s; "
                  f"longest put-to-delivery of those {worst if worst else float('nan'):.2f}s", flush=True)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--signal", choices=["KILL", "TERM"], default="KILL")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lease", type=float, default=10.0, help="lease_duration_secs")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/debug/anthracite"))
    args = ap.parse_args()
    for i in range(args.runs):
        run(args, i + 1)


if __name__ == "__main__":
    main()
