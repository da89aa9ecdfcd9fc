#!/usr/bin/env python3
"""Where a relay process spends its CPU, per stage.

Runs one harness scenario against the relay as its own process (relay.toml.example's settings,
bench/relays/anthracite-example.toml), records the relay's PID with `perf record` (DWARF call
chains) while the load runs, and attributes every sample to one stage by walking its call chain
from the leaf: read (the kernel's receive path and the receiver), parse, route, queue (pending
batches, the destination queues and their spill tier), encode, write (the kernel's send path
and the destination writers), wake-ups (futex, epoll, the scheduler), page faults, allocation,
runtime (tokio), other. Prints the table the benchmarks doc carries.

Usage: bench/profile.py SCENARIO [--bin target/release/anthracite] [--seconds 10]
       [--config bench/relays/anthracite-example.toml] [-- extra harness arguments]
Needs perf and a release build with debug info (the release profile has it).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

# Ordered: the first rule whose pattern matches a frame, walking from the leaf, names the
# stage. Kernel frames come first so that the kernel's share is split by what it serves.
RULES = [
    ("kernel: page faults", re.compile(r"exc_page_fault|handle_mm_fault")),
    ("kernel: wake-ups", re.compile(r"futex|schedule|epoll_wait|ep_poll|try_to_wake_up|sched_")),
    ("kernel: read", re.compile(r"recvfrom|tcp_recvmsg|sys_read\b|udp_recvmsg")),
    ("kernel: write", re.compile(r"sendto|tcp_sendmsg|sys_write\b|sys_writev|udp_sendmsg")),
    ("allocation", re.compile(r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|unlink_chunk|__libc_)")),
    ("encode", re.compile(r"destination::encode|Encoder::|pickle::encode")),
    ("parse", re.compile(r"protocol::(line|number|pickle)|LineFramer|parse_line|pickle::|memchr")),
    ("route", re.compile(r"anthracite::router::|md5x|route_cache|name_cache")),
    ("write", re.compile(r"destination::stream|TcpTransport|destination::outbox|destination::run")),
    ("queue", re.compile(r"ingest::pending|Ingestor::(deliver|push_run|route_run|check|flush)|anthracite::batch|anthracite::queue")),
    ("read", re.compile(r"receiver::|Ingestor::lines")),
    ("runtime", re.compile(r"^tokio::|^mio::|std::sys::pal|parking")),
]


def stage(frames):
    kernel = frames[0].startswith("[k]")
    for f in frames:
        f = f.removeprefix("[k] ")
        for name, pattern in RULES:
            if (kernel or not name.startswith("kernel")) and pattern.search(f):
                return name
    return "kernel: other" if kernel else "other"


def samples(perf_data):
    out = subprocess.run(
        ["perf", "script", "-i", perf_data, "-F", "ip,sym,dso", "--no-inline"],
        capture_output=True, text=True, check=True).stdout
    frames = []
    for line in out.splitlines():
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        parts = line.split(None, 1)
        sym = parts[1] if len(parts) > 1 else "?"
        dso = sym[sym.rfind("(") + 1:-1] if sym.endswith(")") else ""
        sym = re.sub(r"\+0x[0-9a-f]+ \(.*\)$|\s\(.*\)$", "", sym)
        frames.append(("[k] " if "kernel" in dso else "") + sym)
    if frames:
        yield frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--bin", default="target/release/anthracite")
    ap.add_argument("--config", default="bench/relays/anthracite-example.toml")
    ap.add_argument("--seconds", type=float, default=10.0)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    scenario = a.scenario if a.scenario.endswith(".toml") else f"bench/scenarios/{a.scenario}.toml"
    work = tempfile.mkdtemp(prefix="anthracite-profile-")
    log = open(os.path.join(work, "bench.log"), "w")
    relay = f"{os.path.abspath(a.bin)} run --config {{config:{a.config}}}"
    bench = subprocess.Popen(
        [a.bin, "bench", scenario, "--rounds", "1", "--no-progress", "--drain-timeout", "120",
         "--compare", f"relay={relay}", *extra], stdout=log, stderr=subprocess.STDOUT)
    pid = None
    deadline = time.monotonic() + 30
    while pid is None and time.monotonic() < deadline and bench.poll() is None:
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == bench.pid:
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv[0] == os.path.abspath(a.bin).encode() and argv[1:2] == [b"run"] \
                    and b"anthracite-bench-" in b" ".join(argv):
                pid = int(p)
                break
        time.sleep(0.05)
    if pid is None:
        bench.kill()
        sys.exit(f"profile: the relay process did not start; see {work}/bench.log")
    data = os.path.join(work, "perf.data")
    subprocess.run(["perf", "record", "-q", "-F", "999", "--call-graph", "dwarf,16384",
                    "-p", str(pid), "-o", data, "--", "sleep", str(a.seconds)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bench.wait()
    log.close()
    counts = collections.Counter(stage(f) for f in samples(data))
    total = sum(counts.values()) or 1
    with open(os.path.join(work, "bench.log")) as f:
        summary = [l.rstrip() for l in f if "relay CPU" in l or "of which kernel" in l
                   or l.startswith("  delivered") or "lost (sent" in l]
    print(f"{a.scenario}: {total} samples of pid {pid} ({work})")
    for l in summary:
        print(l)
    print("| stage | share |\n|---|---|")
    for name, n in counts.most_common():
        print(f"| {name} | {100 * n / total:.1f} % |")


if __name__ == "__main__":
    main()
