#!/usr/bin/env bash
# The figures of docs/benchmarks.md, "Aggregation beside carbon-aggregator.py and
# carbon-c-relay": bench/scenarios/aggregate.toml (100k input names, 100 aggregation rules, 10k
# output series of 60 s, FORWARD_ALL) against anthracite with the generated rules in its
# [aggregation] (bench/relays/anthracite.toml), carbon-c-relay 3.7.3 with the same rules as
# `aggregate` statements, carbon-aggregator.py 1.1.10 (the venv the test suite installs under
# target/tmp/carbon-1.1.10-venv: `cargo test --test carbon` once) with the same rules file, and
# anthracite relaying the same input without aggregation (plain), rounds alternating. Needs a
# release build (BIN=path overrides it). Logs and JSON go to $1 (default
# bench-results/aggregate); further arguments go to `anthracite bench` (e.g. --datapoints
# 1000000 for a shorter run: carbon-aggregator.py takes about 125 CPU-s per million here, so the
# scenario's 3M take it about 7 minutes). SCENARIO=name runs another scenario of
# bench/scenarios (e.g. aggregate-heavy: 100 rules in groups of four, all twelve methods,
# write-back 2 s, FORWARD_ALL False, pickle in); RELAYS picks among "anthracite plain c-relay
# carbon-aggregator" (default all four).
set -euo pipefail
cd "$(dirname "$0")/.."
scenario="${SCENARIO:-aggregate}"
out="${1:-bench-results/$scenario}"
shift || true
mkdir -p "$out"
. bench/aggregator-relays.sh
relays=()
for r in ${RELAYS:-anthracite plain c-relay carbon-aggregator}; do
    case "$r" in
    anthracite) relays+=("$A") ;;
    plain) relays+=("$P") ;;
    c-relay) relays+=("$C") ;;
    carbon-aggregator) relays+=("$G") ;;
    *) echo "unknown relay $r" >&2; exit 1 ;;
    esac
done
"$bin" bench "bench/scenarios/$scenario.toml" --rounds "${ROUNDS:-1}" --no-progress \
    --compare "${relays[@]}" --json "$out/$scenario.json" "$@" >"$out/$scenario.log" 2>&1
sed -n '/^compare/,$p' "$out/$scenario.log"
