#!/usr/bin/env bash
# Every workload of the "Side by side with carbon-c-relay" table in docs/benchmarks.md:
# anthracite as its own process on relay.toml.example's settings
# (bench/relays/anthracite-example.toml; with the scenario's routing,
# bench/relays/anthracite-example-routing.toml) beside carbon-c-relay 3.7.3 (Debian's package:
# apt-get install carbon-c-relay) in one --compare run per workload, rounds alternating. Needs a
# release build (cargo build --release). Logs and JSON go to $1 (default bench-results/).
# ROUNDS=n sets the rounds (default 3), SCENARIOS="a b" the workloads, BIN the relay binary
# (default target/release/anthracite).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results}"
mkdir -p "$out"
bin="${BIN:-target/release/anthracite}"
rounds="${ROUNDS:-3}"
scenarios="${SCENARIOS:-burst-3m distinct-3m many-clients-1k destinations-32-r2 pickle-in conns-200-names-20k}"
. bench/c-relay.sh
C="$C_RELAY"
run() {
    local scenario="$1" rounds="$2"
    shift 2
    echo "== $scenario"
    "$bin" bench "bench/scenarios/$scenario.toml" --rounds "$rounds" --drain-timeout 120 \
        --no-progress --compare "$@" --json "$out/$scenario.json" >"$out/$scenario.log" 2>&1
    sed -n '/^compare/,$p' "$out/$scenario.log"
}
for s in $scenarios; do
    config=bench/relays/anthracite-example.toml
    if grep -q '^\[routing\]' "bench/scenarios/$s.toml"; then
        config=bench/relays/anthracite-example-routing.toml
    fi
    A="anthracite=$bin run --config {config:$config}"
    case "$s" in
        # carbon-c-relay has no pickle listener.
        pickle-in) run "$s" "$rounds" "$A" ;;
        # A paced run of 30 s: one round.
        conns-200-names-20k) run "$s" 1 "$A" "$C" ;;
        *) run "$s" "$rounds" "$A" "$C" ;;
    esac
done
