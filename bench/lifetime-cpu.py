#!/usr/bin/env python3
"""Runs a command and appends its whole-life CPU seconds (user + system, from wait4) to a file.

Usage: bench/lifetime-cpu.py OUTFILE COMMAND [ARGS...]. The harness stops a relay with SIGTERM
to its process group, so this wrapper ignores SIGTERM and SIGINT itself and waits for the
command to exit. wait4 reports the CPU in microseconds, where /proc's stat counts 10 ms clock
ticks: on a run of 200k datapoints (0.02–0.2 CPU-s) that is the difference between a figure and
its noise (the harness reads each thread's schedstat nanoseconds for the same reason). bench/ab-aggregator.sh wraps every contender in it.
"""
import os
import signal
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "a") as f:
    f.write(f"{usage.ru_utime + usage.ru_stime:.4f}\n")
sys.exit(os.waitstatus_to_exitcode(status))
