#!/usr/bin/env python3
"""A carbon-c-relay configuration of the size sites run, through anthracite and carbon-c-relay.

One configuration file (bench/relays/c-relay-config.conf: 4 clusters of different types, 10
rewrites, about 50 matches, 3 aggregations) with the ports of this run's sinks filled in, read
unchanged by `anthracite run --carbon-c-relay-config` and by carbon-c-relay 3.7.3 (Debian's
package) as processes. The same configuration without its aggregations is a third contender
(routing alone). Each round sends the same pre-rendered lines (several thousand distinct
names, timestamps of the moment each slice is sent) to each contender in turn (A B C A B C …),
reads its CPU time (user + system) from /proc before the first line and once its output has
settled (at least --quiet seconds, default 10, after the last line: every aggregation bucket
emitted), and checks every sink's count: the lines routed must all arrive, as many copies as
`carbon-c-relay -t` (routing alone) says each name gets, and the aggregates' output (names
under `agg.`) is reported beside them.

Usage: bench/c_relay_config.py [--bin target/release/anthracite] [--rounds 3]
       [--datapoints 1000000] [--contenders anthracite,anthracite-routing,carbon-c-relay]
       (also carbon-c-relay-routing; an empty list runs only the --extra builds)
       [--perf anthracite]   (perf record of that contender's last round, a symbol report)
Extra anthracite builds to compare (A/B of a change): --extra NAME=BINARY, on the full
configuration. The table, per-round figures and pairwise ratios go to stdout, logs and the
rendered configuration to --out (default bench-results/c-relay-config).
Needs a release build (cargo build --release) and carbon-c-relay (apt-get install carbon-c-relay).
"""
import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from procs import cpu

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "relays", "c-relay-config.conf")
SINKS = 7  # graphite carbon_ch: 2, apps any_of: 2, archive failover: 2, stats forward: 1
TS = b"TSTSTSTSTS"  # ten bytes: replaced by the epoch second when a slice is sent


def names():
    """Several thousand distinct names of the shapes a Graphite site receives."""
    out = []
    dcs = ["ams1", "fra2", "lon3", "nyc4"]
    hosts = [f"web-{i:03d}" for i in range(12)] + [f"db-{i:02d}" for i in range(4)]
    for dc in dcs:
        for h in hosts:
            base = f"servers.{dc}.{h}"
            for cpu in range(4):
                for m in ("user", "system", "idle", "iowait"):
                    out.append(f"{base}.cpu.{cpu}.{m}")
            for m in ("used", "free", "cached", "buffers"):
                out.append(f"{base}.memory.{m}")
            for d in ("sda", "sdb"):
                for m in ("read_bytes", "write_bytes", "io_time"):
                    out.append(f"{base}.disk.{d}.{m}")
            for m in ("rx_bytes", "tx_bytes", "rx_errors", "tx_errors"):
                out.append(f"{base}.network.eth0.{m}")
            for m in ("01", "05", "15"):
                out.append(f"{base}.loadavg.{m}")
    services = ["checkout", "search", "payments", "login", "catalog", "cart", "profile", "ads"]
    endpoints = ["index", "get", "post", "list", "update", "delete"]
    for s in services:
        for env in ("prod", "staging"):
            for h in range(4):
                for e in endpoints:
                    base = f"apps.{s}.{env}.node{h}"
                    out.append(f"{base}.requests.{e}.count")
                    out.append(f"{base}.requests.{e}.errors")
                    for q in ("p50", "p99", "mean"):
                        out.append(f"{base}.latency.{e}.{q}")
    for s in services:
        for m in ("db_query", "cache_get", "render", "http_call"):
            for q in ("upper_90", "mean", "count"):
                out.append(f"stats.timers.{s}.{m}.{q}")
            out.append(f"stats_counts.{s}.{m}.calls")
            out.append(f"stats.gauges.{s}.{m}.inflight")
    for h in range(24):
        for c in range(2):
            for m in ("user", "system"):
                out.append(f"collectd.node-{h:02d}_example_com.cpu-{c}.cpu-{m}")
        out.append(f"collectd.node-{h:02d}_example_com.memory.memory-used")
    for app in ("Billing", "Search", "Gateway"):
        for h in range(6):
            for g in ("G1_Young", "G1_Old"):
                for m in ("time", "count"):
                    out.append(f"jvm.{app}.host{h}.gc.{g}.{m}")
            out.append(f"jvm.{app}.host{h}.heap.used")
    for h in range(6):
        for m in ("queries", "slow_queries", "threads_connected", "bytes_sent"):
            out.append(f"mysql.db{h}.{m}")
        for m in ("hits", "misses", "evictions", "used_memory"):
            out.append(f"redis.cache{h}.{m}")
    for lb in range(4):
        for b in ("web", "api", "static"):
            for m in ("scur", "rate", "hrsp_5xx", "qtime"):
                out.append(f"haproxy.lb{lb}.{b}.{m}")
    for h in range(8):
        for v in ("www.example.com", "api.example.com"):
            out.append(f"nginx.edge{h}.{v}.requests")
    for t in range(10):
        for p in range(6):
            for m in ("messages_in", "bytes_in", "lag"):
                out.append(f"kafka.cluster1.topic{t}.partition{p}.{m}")
    # A few that carbon-c-relay cleanses (double dots, a trailing dot, a character outside
    # its allowed set).
    for h in range(8):
        out.append(f"servers..ams1.legacy-{h}.uptime")
        out.append(f"servers.fra2.legacy-{h}.uptime.")
        out.append(f"servers.lon3.legacy-{h}.temp(c)")
    return out


def payload(all_names, n, seed=1):
    """n lines cycling through the names in a shuffled order, values of both kinds."""
    rng = random.Random(seed)
    order = list(all_names)
    rng.shuffle(order)
    lines = []
    for i in range(n):
        v = f"{rng.randint(0, 1000)}" if i % 2 else f"{rng.random() * 100:.3f}"
        lines.append(f"{order[i % len(order)]} {v} ".encode() + TS + b"\n")
    return lines


class Sink:
    """A TCP listener counting lines, and those under `agg.` apart."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.lines = 0
        self.agg = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.read, args=(c,), daemon=True).start()

    def read(self, c):
        rest = b""
        while True:
            try:
                data = c.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                c.close()
                return
            data = rest + data
            cut = data.rfind(b"\n") + 1
            whole, rest = data[:cut], data[cut:]
            lines = whole.count(b"\n")
            agg = (b"\n" + whole).count(b"\nagg.")
            with self.lock:
                self.lines += lines
                self.agg += agg

    def counts(self):
        with self.lock:
            return self.lines, self.agg


def render(template, sinks, with_aggregations):
    text = open(template).read()
    for i, s in enumerate(sinks):
        text = text.replace(f"{{sink{i}}}", f"127.0.0.1:{s.port}")
    if not with_aggregations:
        text = re.sub(r"^aggregate\b.*?;\s*$", "", text, flags=re.S | re.M)
    return text


def expected_copies(conf, all_names):
    """Copies of each name's line that reach a sink, from `carbon-c-relay -t` (routing): each
    name is followed by a sentinel that the first match blackholes, so the members printed
    between two sentinels are that name's."""
    sentinel = "carbon.relays.SENTINEL"
    text = f"{sentinel} 1 1\n" + "".join(f"{n} 1 1\n{sentinel} 1 1\n" for n in all_names)
    out = subprocess.run(["carbon-c-relay", "-t", "-f", conf], input=text,
                         capture_output=True, text=True, check=True).stdout
    segments = re.split(r"^    -> carbon\.relays\.SENTINEL$", out, flags=re.M)
    # The first segment holds the configuration (whose members would count), the last what
    # follows the last sentinel.
    counts = [len(re.findall(r"^        127\.0\.0\.1:\d+$", seg, flags=re.M))
              for seg in segments[1:-1]]
    if len(counts) != len(all_names):
        sys.exit(f"carbon-c-relay -t: {len(counts)} routes for {len(all_names)} names")
    return out, dict(zip(all_names, counts))


def start(cmd, log):
    """Starts a relay; carbon-c-relay sometimes dies right after it starts listening."""
    for _ in range(5):
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(0.5)
        if p.poll() is None:
            return p
    sys.exit(f"{cmd[0]} does not stay up: see {log.name}")


def stop(p):
    if p.poll() is None:
        os.kill(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def wait_listening(port, deadline=20):
    end = time.time() + deadline
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def send(port, lines, connections=4, slice_lines=20_000):
    """The lines over `connections` connections, each slice stamped when it is sent."""
    def one(part):
        s = socket.create_connection(("127.0.0.1", port))
        for i in range(0, len(part), slice_lines):
            chunk = b"".join(part[i:i + slice_lines])
            s.sendall(chunk.replace(TS, str(int(time.time())).encode()))
        s.close()
    threads = [threading.Thread(target=one, args=(lines[c::connections],)) for c in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_round(label, cmd, port, sinks, lines, expected, settle, quiet, log, perf=False):
    p = start(cmd, log)
    wait_listening(port)
    time.sleep(1.0)
    base = [s.counts() for s in sinks]
    c0 = cpu(p.pid)
    rec = None
    if perf:
        rec = subprocess.Popen(["perf", "record", "-g", "-o", perf, "-p", str(p.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    send(port, lines)
    sent_secs = time.time() - t0
    # Settled: the routed lines all in, the aggregates' count still for `settle` seconds, and
    # at least `quiet` seconds since the last line was sent (every bucket expired: the
    # aggregations' `expire after` and two intervals).
    sent_at = time.time()
    last, still_since, deadline = None, time.time(), time.time() + 120
    while time.time() < deadline:
        now = [s.counts() for s in sinks]
        routed = sum(n[0] - n[1] - (b[0] - b[1]) for n, b in zip(now, base))
        agg = sum(n[1] - b[1] for n, b in zip(now, base))
        if (routed, agg) != last:
            last, still_since = (routed, agg), time.time()
        elif (routed >= expected and time.time() - still_since >= settle
              and time.time() - sent_at >= quiet):
            break
        time.sleep(0.2)
    cpu = cpu(p.pid) - c0
    if rec is not None:
        rec.send_signal(signal.SIGINT)
        rec.wait()
    stop(p)
    routed, agg = last
    per_sink = [n[0] - b[0] for n, b in zip([s.counts() for s in sinks], base)]
    return {"label": label, "cpu": cpu, "routed": routed, "agg": agg, "sent_secs": sent_secs,
            "per_sink": per_sink, "lost": expected - routed}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/anthracite")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--datapoints", type=int, default=1_000_000)
    ap.add_argument("--contenders", default="anthracite,anthracite-routing,carbon-c-relay")
    ap.add_argument("--extra", action="append", default=[], help="NAME=BINARY, on the full configuration")
    ap.add_argument("--perf", default=None, help="record this contender's last round with perf")
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--quiet", type=float, default=10.0,
                    help="seconds after the last line before CPU is read (all contenders)")
    ap.add_argument("--out", default="bench-results/c-relay-config")
    a = ap.parse_args()
    if shutil.which("carbon-c-relay") is None:
        sys.exit("carbon-c-relay is not installed (apt-get install carbon-c-relay)")
    os.makedirs(a.out, exist_ok=True)
    all_names = names()
    sinks = [Sink() for _ in range(SINKS)]
    work = tempfile.mkdtemp(prefix="c-relay-config-")
    full = os.path.join(work, "full.conf")
    routing = os.path.join(work, "routing.conf")
    with open(full, "w") as f:
        f.write(render(TEMPLATE, sinks, True))
    with open(routing, "w") as f:
        f.write(render(TEMPLATE, sinks, False))
    shutil.copy(full, os.path.join(a.out, "full.conf"))
    test_out, copies = expected_copies(routing, all_names)
    with open(os.path.join(a.out, "routes.txt"), "w") as f:
        f.write(test_out)
    lines = payload(all_names, a.datapoints)
    per_name = {}
    for l in lines:
        n = l.split(b" ", 1)[0].decode()
        per_name[n] = per_name.get(n, 0) + 1
    missing = [n for n in per_name if n not in copies]
    if missing:
        sys.exit(f"carbon-c-relay -t printed no route for {len(missing)} names, e.g. {missing[:3]}")
    expected = sum(copies[n] * k for n, k in per_name.items())
    print(f"{len(all_names)} distinct names, {a.datapoints} datapoints a round, "
          f"{expected} routed copies expected; configuration in {a.out}/full.conf", flush=True)
    contenders = []
    for c in filter(None, a.contenders.split(",")):
        if c == "anthracite":
            contenders.append((c, lambda port: [a.bin, "run", "--carbon-c-relay-config", full, "--carbon-c-relay-args", f"-p {port}"]))
        elif c == "anthracite-routing":
            contenders.append((c, lambda port: [a.bin, "run", "--carbon-c-relay-config", routing, "--carbon-c-relay-args", f"-p {port}"]))
        elif c == "carbon-c-relay":
            contenders.append((c, lambda port: ["carbon-c-relay", "-f", full, "-p", str(port), "-w", "2", "-q", "4000000"]))
        elif c == "carbon-c-relay-routing":
            contenders.append((c, lambda port: ["carbon-c-relay", "-f", routing, "-p", str(port), "-w", "2", "-q", "4000000"]))
        else:
            sys.exit(f"unknown contender {c}")
    for e in a.extra:
        name, binary = e.split("=", 1)
        contenders.append((name, lambda port, b=binary: [b, "run", "--carbon-c-relay-config", full, "--carbon-c-relay-args", f"-p {port}"]))
    results = {name: [] for name, _ in contenders}
    for r in range(a.rounds):
        for name, cmd in contenders:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
            s.close()
            perf = (os.path.join(a.out, f"{name}.perf.data")
                    if a.perf == name and r == a.rounds - 1 else False)
            with open(os.path.join(a.out, f"{name}.{r}.log"), "w") as log:
                res = run_round(name, cmd(port), port, sinks, lines, expected, a.settle, a.quiet,
                                log, perf)
            results[name].append(res)
            print(f"round {r + 1} {name:24} {res['cpu'] * 1e6 / a.datapoints:7.3f} CPU-s per 1M  "
                  f"routed {res['routed']} (lost {res['lost']})  aggregates {res['agg']}  "
                  f"sent in {res['sent_secs']:.1f} s", flush=True)
    print()
    print("| contender | CPU-s per 1M datapoints, per round | median | lost | aggregates out |")
    print("|---|---|---|---|---|")
    med = {}
    for name, rs in results.items():
        per = [x["cpu"] * 1e6 / a.datapoints for x in rs]
        med[name] = sorted(per)[len(per) // 2]
        print(f"| {name} | {' / '.join(f'{x:.3f}' for x in per)} | {med[name]:.3f} | "
              f"{sum(x['lost'] for x in rs)} | {' / '.join(str(x['agg']) for x in rs)} |")
    names_ = list(results)
    print()
    for i, x in enumerate(names_):
        for y in names_[i + 1:]:
            ratios = sorted(ry["cpu"] / rx["cpu"] for rx, ry in zip(results[x], results[y]) if rx["cpu"] > 0)
            if ratios:
                print(f"{y} / {x}: ×{ratios[len(ratios) // 2]:.2f} (median of rounds; "
                      f"{' / '.join(f'{q:.2f}' for q in ratios)})")
    if a.perf:
        rep = subprocess.run(["perf", "report", "-i", os.path.join(a.out, f"{a.perf}.perf.data"),
                              "--no-children", "--sort", "sym", "--stdio", "--percent-limit", "0.7",
                              "-g", "none"], capture_output=True, text=True).stdout
        with open(os.path.join(a.out, f"{a.perf}.perf.txt"), "w") as f:
            f.write(rep)
        print("\n".join(l for l in rep.splitlines() if l and not l.startswith("#"))[:4000])
    lost = sum(x["lost"] for rs in results.values() for x in rs)
    if lost:
        sys.exit(f"{lost} routed copies did not arrive")


if __name__ == "__main__":
    main()
