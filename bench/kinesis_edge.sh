#!/usr/bin/env bash
# Edge → Kinesis beside edge → TCP, on bench/scenarios/kinesis-edge-1m.toml: CPU-seconds per
# million datapoints of the edge relay process (from /proc), alternating rounds. Kinesis is
# kinesalite (installed by the test support: `cargo test --test kinesis` once, or
# `npm ci --prefix crates/anthracite-testkit/servers/kinesalite`) on a fixed port; a consumer relay (not measured) reads
# the stream into the harness's sink so deliveries are counted end to end. Needs a release
# build (cargo build --release; BIN=path overrides the binary) and curl. Logs and JSON go to $1
# (default bench-results/); further arguments go to `anthracite bench` (e.g. --datapoints 300000); ROUNDS=n sets the rounds (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results}"
shift || true
mkdir -p "$out"
bin="${BIN:-target/release/anthracite}"
kport=14567
sink_port=14104
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# kinesalite exits when its stdin closes: a FIFO this shell holds open until it exits.
mkfifo "$work/kinesalite.stdin"
node crates/anthracite-testkit/servers/kinesalite/start.js "$kport" <"$work/kinesalite.stdin" >"$out/kinesalite.log" 2>&1 &
pids+=($!)
exec 3>"$work/kinesalite.stdin"
kinesis() { # target, JSON body: kinesalite checks that a signature is present, not its value
    curl -sf "http://127.0.0.1:$kport/" -H "X-Amz-Target: Kinesis_20131202.$1" \
        -H 'Content-Type: application/x-amz-json-1.1' -H 'X-Amz-Date: 20260101T000000Z' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/kinesis/aws4_request, SignedHeaders=host;x-amz-date, Signature=0' \
        -d "$2"
}
for _ in $(seq 100); do kinesis ListStreams '{}' >/dev/null 2>&1 && break; sleep 0.1; done
kinesis CreateStream '{"StreamName":"bench-edge","ShardCount":4}' >/dev/null
for _ in $(seq 100); do
    kinesis DescribeStream '{"StreamName":"bench-edge"}' | grep -q '"StreamStatus":"ACTIVE"' && break
    sleep 0.1
done
export AWS_ACCESS_KEY_ID=AKIDBENCH AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 \
    AWS_EC2_METADATA_DISABLED=true
sed "s/KINESIS_PORT/$kport/" bench/relays/kinesis-edge.toml >"$work/kinesis-edge.toml"
cat >"$work/consumer.toml" <<TOML
[listen]
line_tcp = ""
pickle_tcp = ""
[destinations]
servers = ["127.0.0.1:$sink_port:a"]
# The harness's sink exists only during a run: reconnect quickly when it comes back.
backoff_min_ms = 20
backoff_max_ms = 200
[telemetry]
interval_secs = 0
[[kinesis]]
stream = "bench-edge"
endpoint_url = "http://127.0.0.1:$kport"
initial_position = "latest"
checkpoint_dir = "$work/checkpoints"
poll_idle_ms = 200
poll_busy_ms = 200
TOML
"$bin" run --config "$work/consumer.toml" >"$out/kinesis-consumer.log" 2>&1 &
pids+=($!)
K="kinesis=$bin run --config {config:$work/kinesis-edge.toml}"
T="tcp=$bin run --config {config:bench/relays/tcp-edge.toml}"
"$bin" bench bench/scenarios/kinesis-edge-1m.toml --rounds "${ROUNDS:-3}" --sink-ports "$sink_port" \
    --compare "$K" "$T" --json "$out/kinesis-edge-1m.json" "$@" >"$out/kinesis-edge-1m.log" 2>&1
sed -n '/^compare/,$p' "$out/kinesis-edge-1m.log"
