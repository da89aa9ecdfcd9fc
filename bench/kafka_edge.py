#!/usr/bin/env python3
"""Both stages of the durable pipeline on Kafka, measured by `anthracite bench`.

One Kafka broker (as bench/kafka_stages.py starts it, from target/tmp/kafka-broker installed by
`cargo test --test kafka`), release-built relays, the harness's generator and sink, scenario
bench/scenarios/kafka-edge-1m.toml (1M datapoints at 100k/s over 100k names):

  edge    `--compare` of an edge relay writing to a topic (a consumer relay, not measured,
          reads the topic into the harness's sink) and the same edge writing over TCP to the
          sink: the edge's CPU per 1M and the end-to-end latency through the broker.
  fleet   `--target` an edge relay (not measured) writing to a second topic, `--relay-pid` the
          consumer relay reading it into the sink: the consumer's CPU per 1M and the same
          end-to-end latency.

Standard library only.

    cargo build --release && cargo test --test kafka broker_starts
    python3 bench/kafka_edge.py --binary target/release/anthracite [--rounds 2] [-- bench args]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_stages import ROOT, free_port, ready, relay, start_broker, stop_all  # noqa: E402

SCENARIO = os.path.join(ROOT, "bench/scenarios/kafka-edge-1m.toml")
COMMON = "[telemetry]\ninterval_secs = 0\n"


def consumer(binary, work, name, bootstrap, topic, sink_port):
    """A relay reading `topic` into the harness's sink at `sink_port`; returns (proc, admin)."""
    admin = free_port()
    toml = (
        f'[listen]\nline_tcp = ""\npickle_tcp = ""\n[admin]\nlisten = "127.0.0.1:{admin}"\n'
        f'[destinations]\nservers = ["127.0.0.1:{sink_port}:a"]\n'
        # The harness's sink exists only during a run: reconnect quickly when it comes back.
        "backoff_min_ms = 20\nbackoff_max_ms = 200\n"
        f'{COMMON}[[kafka]]\nbrokers = ["{bootstrap}"]\ntopics = ["{topic}"]\n'
        f'group_id = "{name}"\nformat = "pickle"\ninitial_offset = "earliest"\n'
    )
    p = relay(binary, work, name, toml)
    deadline = time.time() + 60
    while not ready(admin):
        if p.poll() is not None or time.time() > deadline:
            sys.exit(f"the {name} relay did not become ready; see {work}/{name}.log")
        time.sleep(0.1)
    # Partitions are assigned after the first poll (the topic is new and read from its
    # earliest offset, so nothing produced before the assignment is skipped).
    time.sleep(3)
    return p, admin


def edge_template(work, bootstrap, topic):
    path = os.path.join(work, f"kafka-edge-{topic}.toml")
    with open(path, "w") as f:
        f.write(
            '[listen]\nline_tcp = "127.0.0.1:{line_port}"\npickle_tcp = "127.0.0.1:{pickle_port}"\n'
            f'[destinations]\nservers = [{{ address = "{bootstrap}:kafka", protocol = "kafka", '
            f'kafka = {{ topic = "{topic}", format = "pickle" }} }}]\n{COMMON}'
        )
    return path


def bench(binary, out, name, args):
    log = os.path.join(out, f"kafka-{name}.log")
    with open(log, "w") as f:
        rc = subprocess.call([binary, "bench", SCENARIO, "--no-progress", *args], stdout=f, stderr=f)
    text = open(log).read()
    print(f"== {name} (log: {log})")
    keep = text[text.find("compare"):] if "compare" in text else text
    for line in keep.splitlines():
        if not line.startswith("    sink"):
            print(line)
    if rc != 0:
        sys.exit(f"anthracite bench failed ({rc}); see {log}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/anthracite"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results/kafka"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("rest", nargs="*", help="further `anthracite bench` arguments")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    procs = []
    with tempfile.TemporaryDirectory() as work:
        broker, bootstrap = start_broker(work)
        procs.append(broker)
        try:
            sink_port = free_port()
            c, _ = consumer(args.binary, work, "edge-consumer", bootstrap, "edge", sink_port)
            procs.append(c)
            edge = edge_template(work, bootstrap, "edge")
            bench(args.binary, args.out, "edge", [
                "--rounds", str(args.rounds), "--sink-ports", str(sink_port),
                "--json", os.path.join(args.out, "kafka-edge.json"),
                "--compare", f"kafka={args.binary} run --config {{config:{edge}}}",
                f"tcp={args.binary} run --config {{config:bench/relays/tcp-edge.toml}}",
                *args.rest,
            ])
            sink_port = free_port()
            line = free_port()
            c, _ = consumer(args.binary, work, "fleet-consumer", bootstrap, "fleet", sink_port)
            procs.append(c)
            with open(edge_template(work, bootstrap, "fleet")) as f:
                fixed = f.read().replace("{line_port}", str(line)).replace("{pickle_port}", str(free_port()))
            e = relay(args.binary, work, "fleet-edge", fixed)
            procs.append(e)
            time.sleep(2)
            bench(args.binary, args.out, "fleet", [
                "--target", f"127.0.0.1:{line}", "--relay-pid", str(c.pid),
                "--sink-ports", str(sink_port),
                "--json", os.path.join(args.out, "kafka-fleet.json"), *args.rest,
            ])
        finally:
            stop_all(procs)


if __name__ == "__main__":
    main()
