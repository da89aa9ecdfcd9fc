#!/usr/bin/env bash
# The "idle aggregator" figure of docs/benchmarks.md: what an aggregator holding many open
# output series costs while no datapoint arrives (the series timers ticking over intervals
# with nothing new). anthracite runs as its own process with one rule,
# `agg.<n> (FREQUENCY) = sum idle.<n>`, and WRITE_BACK (seconds, 0: the frequency); SERIES
# datapoints for as many distinct names open as many output series (each interval is sent once
# at its first tick, to a stand-in carbon-cache, `anthracite sink`). After the first
# write-back tick has passed (SETTLE seconds after the input, default frequency + 5), the
# relay's CPU time (utime + stime from /proc/PID/stat) is read over WINDOW seconds, while the
# series are still open (they age out MAX_AGGREGATION_INTERVALS = 5 frequencies later).
# Needs a release build (BIN=path overrides it). Prints one line: series open, CPU-s, % of a core.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${BIN:-target/release/anthracite}"
series="${SERIES:-1000000}"
frequency="${FREQUENCY:-60}"
write_back="${WRITE_BACK:-0}"
window="${WINDOW:-30}"
settle="${SETTLE:-$((frequency + 5))}"
dir="$(mktemp -d)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
line_port=$(free_port)
sink_port=$(free_port)
admin_port=$(free_port)
cat >"$dir/relay.toml" <<TOML
[aggregation]
rules = ["agg.<n> ($frequency) = sum idle.<n>"]
forward_all = false
log_misses = false
write_back_frequency_secs = $write_back
max_series = $((series + 1))
max_cached_names = $((series + 1))
max_intervals_held = $((series * 2 + 1))

[listen]
line_tcp = "127.0.0.1:$line_port"

[destinations]
servers = ["127.0.0.1:$sink_port"]
protocol = "pickle"

[admin]
listen = "127.0.0.1:$admin_port"

[telemetry]
interval_secs = 0
TOML
"$bin" sink --listen "127.0.0.1:$sink_port" >/dev/null 2>"$dir/sink.log" &
sink_pid=$!
"$bin" run --config "$dir/relay.toml" 2>"$dir/relay.log" &
relay_pid=$!
trap 'kill "$relay_pid" "$sink_pid" 2>/dev/null || true' EXIT
python3 - "$line_port" "$series" <<'PY'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("the relay did not listen")
ts = int(time.time())
chunk = 50_000
for start in range(0, n, chunk):
    s.sendall("".join(f"idle.{i} 1 {ts}\n" for i in range(start, min(n, start + chunk))).encode())
s.close()
PY
metric() {
    curl -s "http://127.0.0.1:$admin_port/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}
cpu() { awk '{ print $14 + $15 }' "/proc/$relay_pid/stat"; }
sleep "$settle"
open=$(metric anthracite_aggregator_series)
sent=$(metric anthracite_aggregator_sent_datapoints_total)
t0=$(cpu)
sleep "$window"
t1=$(cpu)
still=$(metric anthracite_aggregator_series)
rss=$(awk '/VmRSS/ { print $2 }' "/proc/$relay_pid/status")
hz=$(getconf CLK_TCK)
awk -v a="$t0" -v b="$t1" -v hz="$hz" -v w="$window" -v open="$open" -v still="$still" \
    -v sent="$sent" -v rss="$rss" -v f="$frequency" -v wb="$write_back" 'BEGIN {
    cpu = (b - a) / hz
    printf "idle aggregator: %d series open (%d at the end), %d aggregates sent before the window, frequency %d s, write-back %s s: %.2f CPU-s over %d s = %.2f %% of a core, RSS %.0f MiB\n",
        open, still, sent, f, (wb == 0 ? "=frequency" : wb), cpu, w, 100 * cpu / w, rss / 1024
}'
