#!/usr/bin/env python3
"""The Kafka edge against the TCP edge at steady rates and idle, measured by `anthracite bench`.

One Kafka broker (as bench/kafka_stages.py starts it, from target/tmp/kafka-broker installed by
`cargo test --test kafka broker_starts`), release-built relays:

  idle    an edge relay writing to a topic and the same edge writing over TCP to a sink
          (`anthracite sink`), both started, left `--settle` seconds to connect, then their
          CPU time (utime + stime from /proc/PID/stat) read over `--idle` seconds with no input.
  steady  `anthracite bench --compare` of the two edges (A B A B …) at each of `--rates`
          datapoints/s for `--duration` seconds (scenario bench/scenarios/kafka-edge-1m.toml
          otherwise); a consumer relay, not measured, reads the topic into the harness's sink.

Standard library only.

    cargo build --release && cargo test --test kafka broker_starts
    python3 bench/kafka_steady.py --binary target/release/anthracite [--rates 4500,45000] \
        [--duration 60] [--rounds 2] [--idle 30] [--property linger.ms=20] [--also before=PATH]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_edge import bench, consumer  # noqa: E402
from kafka_stages import ROOT, cpu, free_port, ready, relay, start_broker, stop_all  # noqa: E402


def kafka_servers(bootstrap, topic, properties):
    """The `servers` entry of an edge writing pickle messages to `topic`."""
    props = ", ".join(f'"{k}" = "{v}"' for k, v in properties)
    return (
        f'[{{ address = "{bootstrap}:kafka", protocol = "kafka", kafka = {{ topic = "{topic}", '
        f'format = "pickle", properties = {{ {props} }} }} }}]'
    )


def edge_template(work, bootstrap, topic, properties):
    path = os.path.join(work, f"kafka-edge-{topic}.toml")
    with open(path, "w") as f:
        f.write(
            '[listen]\nline_tcp = "127.0.0.1:{line_port}"\npickle_tcp = "127.0.0.1:{pickle_port}"\n'
            f"[destinations]\nservers = {kafka_servers(bootstrap, topic, properties)}\n"
            "[telemetry]\ninterval_secs = 0\n"
        )
    return path


def started(p, admin, name, work):
    deadline = time.time() + 60
    while not ready(admin):
        if p.poll() is not None or time.time() > deadline:
            sys.exit(f"the {name} relay did not become ready; see {work}/{name}.log")
        time.sleep(0.1)


def idle(binary, also, work, bootstrap, properties, settle, window, procs):
    """CPU-ms per second of idle Kafka edges and an idle TCP edge, side by side."""
    sink_port = free_port()
    sink_log = open(os.path.join(work, "idle-sink.log"), "w")
    procs.append(subprocess.Popen([binary, "sink", "--listen", f"127.0.0.1:{sink_port}"],
                                  stdout=subprocess.DEVNULL, stderr=sink_log))
    edges = {}
    kafka = kafka_servers(bootstrap, "idle", properties)
    for name, edge_binary, servers in [
        ("kafka", binary, kafka),
        *[(n, b, kafka) for n, b in also],
        ("tcp", binary, f'["127.0.0.1:{sink_port}"]\nprotocol = "pickle"'),
    ]:
        admin = free_port()
        toml = (
            f'[listen]\nline_tcp = "127.0.0.1:{free_port()}"\npickle_tcp = ""\n'
            f'[admin]\nlisten = "127.0.0.1:{admin}"\n'
            f"[destinations]\nservers = {servers}\n[telemetry]\ninterval_secs = 0\n"
        )
        p = relay(edge_binary, work, f"idle-{name}", toml)
        procs.append(p)
        edges[name] = (p, admin)
    for name, (p, admin) in edges.items():
        started(p, admin, f"idle-{name}", work)
    time.sleep(settle)
    before = {n: cpu(p.pid) for n, (p, _) in edges.items()}
    time.sleep(window)
    print(f"== idle ({window:.0f} s after {settle:.0f} s settling, no input)")
    for n, (p, _) in edges.items():
        ms = (cpu(p.pid) - before[n]) * 1000 / window
        print(f"    {n:6} {ms:6.2f} ms of CPU per second")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/anthracite"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results/kafka"))
    ap.add_argument("--rates", default="4500,45000", help="datapoints/s, comma-separated")
    ap.add_argument("--duration", type=float, default=60, help="seconds of sending per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--idle", type=float, default=30, help="seconds of the idle window (0: skip)")
    ap.add_argument("--settle", type=float, default=5)
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka property of the Kafka edge's producer (repeatable)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=BINARY",
                    help="a further Kafka edge in the comparison, run from another build "
                    "(e.g. the one before a change; repeatable)")
    ap.add_argument("rest", nargs="*", help="further `anthracite bench` arguments")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    properties = [p.split("=", 1) for p in args.property]
    also = [a.split("=", 1) for a in args.also]
    procs = []
    with tempfile.TemporaryDirectory() as work:
        broker, bootstrap = start_broker(work)
        procs.append(broker)
        try:
            if args.idle > 0:
                idle(args.binary, also, work, bootstrap, properties, args.settle, args.idle, procs)
            rates = [r for r in args.rates.split(",") if r]
            if rates:
                sink_port = free_port()
                c, _ = consumer(args.binary, work, "steady-consumer", bootstrap, "steady", sink_port)
                procs.append(c)
                edge = edge_template(work, bootstrap, "steady", properties)
            for rate in rates:
                bench(args.binary, args.out, f"steady-{rate}", [
                    "--rate", rate, "--duration", str(args.duration),
                    "--rounds", str(args.rounds), "--sink-ports", str(sink_port),
                    "--json", os.path.join(args.out, f"kafka-steady-{rate}.json"),
                    "--compare", f"kafka={args.binary} run --config {{config:{edge}}}",
                    *[f"{n}={b} run --config {{config:{edge}}}" for n, b in also],
                    f"tcp={args.binary} run --config {{config:bench/relays/tcp-edge.toml}}",
                    *args.rest,
                ])
        finally:
            stop_all(procs)


if __name__ == "__main__":
    main()
