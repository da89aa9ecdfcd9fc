#!/usr/bin/env bash
# The "Cost as the configuration grows" tables of docs/benchmarks.md: `anthracite bench --sweep`
# over rule count (bench/scenarios/cost-rules.toml) and over destinations × replication
# (bench/scenarios/cost-destinations.toml), anthracite as its own process beside carbon-c-relay
# 3.7.3 (Debian's package) with the same rules or ring, rounds alternating at each point. Needs
# a release build (BIN=path overrides it). Logs, JSON and SVG go to $1 (default
# bench-results/cost); ROUNDS=n sets the rounds per point (default 2); further arguments go to
# `anthracite bench` (e.g. --datapoints 1000000).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results/cost}"
shift || true
mkdir -p "$out"
bin="${BIN:-target/release/anthracite}"
A="anthracite=$bin run --config {config:bench/relays/anthracite.toml}"
. bench/c-relay.sh
C="$C_RELAY"
for s in ${SWEEPS:-rules destinations}; do
    echo "== cost-$s"
    "$bin" bench "bench/scenarios/cost-$s.toml" --sweep --rounds "${ROUNDS:-2}" --no-progress \
        --compare "$A" "$C" --json "$out/$s.json" --svg "$out/$s.svg" "$@" >"$out/$s.log" 2>&1 ||
        echo "(failed: see $out/$s.log)"
    sed -n '/^cost sweep/,$p' "$out/$s.log"
done
