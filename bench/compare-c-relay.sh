#!/usr/bin/env bash
# Every workload of the "Side by side with carbon-c-relay" table in docs/benchmarks.md:
# anthracite as its own process on relay.toml.example's settings
# (bench/relays/anthracite-example.toml) beside carbon-c-relay 3.7.3 (Debian's package: apt-get
# install carbon-c-relay) in one --compare run per workload, rounds alternating. Needs a release
# build (cargo build --release). Logs and JSON go to $1 (default bench-results/).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results}"
mkdir -p "$out"
bin=target/release/anthracite
A="anthracite=$bin run --config {config:bench/relays/anthracite-example.toml}"
. bench/c-relay.sh
C="$C_RELAY"
run() {
    local scenario="$1" rounds="$2"
    shift 2
    echo "== $scenario"
    "$bin" bench "bench/scenarios/$scenario.toml" --rounds "$rounds" --drain-timeout 120 \
        --compare "$@" --json "$out/$scenario.json" >"$out/$scenario.log" 2>&1
    sed -n '/^compare/,$p' "$out/$scenario.log"
}
run burst-3m 3 "$A" "$C"
run distinct-3m 3 "$A" "$C"
run many-clients-1k 3 "$A" "$C"
# carbon-c-relay has no pickle listener.
run pickle-in 3 "$A"
run conns-200-names-20k 1 "$A" "$C"
