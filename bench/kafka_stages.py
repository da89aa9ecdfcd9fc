#!/usr/bin/env python3
"""CPU cost of each stage of the durable pipeline, beside the relay's plain TCP cost.

Real processes: one Kafka broker (Kafka 4.1.1 as installed by `cargo test --test kafka` under
target/tmp/kafka-broker), `anthracite` relays, and discard sinks that count bytes. Three runs,
each sending the same N datapoints (plaintext, 20 000 names) over one TCP connection:

  tcp     line in -> pickle out to a TCP sink                 (the relay's TCP cost)
  edge    line in -> protocol = "kafka" destination (pickle)  (stage 1)
  fleet   [[kafka]] (pickle) in -> carbon_ch to two TCP sinks (stage 2, reading what `edge` wrote)

For each it reports the relay's CPU seconds (utime + stime from /proc) per 1M datapoints
and the wall time until its destinations counted them sent (anthracite_sent_datapoints_total).

Standard library only.

    cargo build --release && cargo test --test kafka --no-run && cargo test --test kafka broker_starts
    python3 bench/kafka_stages.py --binary target/release/anthracite --datapoints 2000000
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from procs import cpu, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KAFKA = os.path.join(ROOT, "target/tmp/kafka-broker")
def metric(admin, name):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def sink():
    """A TCP sink that reads and discards; returns its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def serve():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=lambda c=conn: [None for _ in iter(lambda: c.recv(1 << 20), b"")], daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def start_broker(work):
    port, cport = free_port(), free_port()
    props = os.path.join(work, "server.properties")
    with open(props, "w") as f:
        f.write(
            f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{cport}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            f"inter.broker.listener.name=PLAINTEXT\nlog.dirs={work}/data\nnum.partitions=6\n"
            "auto.create.topics.enable=true\noffsets.topic.replication.factor=1\noffsets.topic.num.partitions=3\n"
            "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
            "share.coordinator.state.topic.replication.factor=1\ngroup.initial.rebalance.delay.ms=0\n"
        )
    log = open(os.path.join(work, "broker.log"), "w")
    cp = f"{KAFKA}/classes:{KAFKA}/lib/*"
    p = subprocess.Popen(["java", "-Xmx1g", "-cp", cp, "LoopbackKafka", props], stdout=log, stderr=log)
    deadline = time.time() + 180
    while "Kafka Server started" not in open(os.path.join(work, "broker.log")).read():
        if p.poll() is not None or time.time() > deadline:
            sys.exit("the broker did not start; see " + log.name)
        time.sleep(0.2)
    return p, f"127.0.0.1:{port}"


def relay(binary, work, name, toml):
    path = os.path.join(work, name + ".toml")
    with open(path, "w") as f:
        f.write(toml)
    log = open(os.path.join(work, name + ".log"), "w")
    return subprocess.Popen([binary, "run", "--config", path], stdout=log, stderr=log)


def payload(n):
    now = int(time.time())
    lines = [f"bench.kafka.series{i % 20000}.value {i} {now}\n" for i in range(n)]
    return "".join(lines).encode()


def measure(proc, admin, expected, send, from_start=False):
    """CPU and wall from `send` (or, for a relay that reads on its own, from its start) until
    its destinations counted `expected` datapoints sent."""
    start = time.time()
    while not ready(admin):
        time.sleep(0.05)
    before = 0.0 if from_start else cpu(proc.pid)
    if not from_start:
        start = time.time()
    send()
    while metric(admin, "anthracite_sent_datapoints_total") < expected:
        if proc.poll() is not None:
            sys.exit("a relay exited; see its log")
        time.sleep(0.05)
    return cpu(proc.pid) - before, time.time() - start


def stop_all(procs):
    """Stops the processes started, last first (SIGTERM, then SIGKILL after 30 s)."""
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def ready(admin):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/anthracite"))
    ap.add_argument("--datapoints", type=int, default=2_000_000)
    args = ap.parse_args()
    n = args.datapoints
    data = payload(n)
    work = tempfile.mkdtemp(prefix="anthracite-kafka-bench-")
    broker, bootstrap = start_broker(work)
    procs = []
    try:
        common = "[telemetry]\ninterval_secs = 0\n[destinations.queue]\nmax_datapoints = 4000000\nmax_bytes = 536870912\n"
        results = {}

        def send_to(port):
            def go():
                with socket.create_connection(("127.0.0.1", port)) as s:
                    s.sendall(data)
            return go

        # tcp: the relay's own cost.
        line, admin = free_port(), free_port()
        p = relay(args.binary, work, "tcp", f"[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[destinations]\nservers = [\"127.0.0.1:{sink()}:a\"]\n{common}")
        procs.append(p)
        results["tcp"] = measure(p, admin, n, send_to(line))
        # edge: line in -> Kafka.
        line, admin = free_port(), free_port()
        p = relay(args.binary, work, "edge", f"[listen]\nline_tcp = \"127.0.0.1:{line}\"\npickle_tcp = \"\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[destinations]\nflush_bytes = 1048576\nservers = [{{ address = \"{bootstrap}:kafka\", protocol = \"kafka\", kafka = {{ topic = \"bench\", format = \"pickle\" }} }}]\n{common}")
        procs.append(p)
        results["edge"] = measure(p, admin, n, send_to(line))
        # fleet: Kafka -> two caches.
        admin = free_port()
        p = relay(args.binary, work, "fleet", f"[listen]\nline_tcp = \"\"\npickle_tcp = \"\"\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n[destinations]\nservers = [\"127.0.0.1:{sink()}:a\", \"127.0.0.1:{sink()}:b\"]\n{common}[[kafka]]\nbrokers = [\"{bootstrap}\"]\ntopics = [\"bench\"]\ngroup_id = \"bench\"\nformat = \"pickle\"\n")
        procs.append(p)
        results["fleet"] = measure(p, admin, n, lambda: None, from_start=True)
        print(f"{n} datapoints, 20000 names; CPU seconds of the relay process per 1M datapoints, wall seconds")
        for k, (c, w) in results.items():
            print(f"  {k:6} {c * 1e6 / n:6.3f} CPU-s/1M   {w:6.2f} s wall   ({c / results['tcp'][0]:.2f}x tcp)")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        broker.terminate()
        broker.wait(timeout=30)


if __name__ == "__main__":
    main()
