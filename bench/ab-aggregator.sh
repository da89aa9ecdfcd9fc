#!/usr/bin/env bash
# A/B of anthracite builds on an aggregation scenario (default bench/scenarios/aggregate-heavy.toml;
# SCENARIO=name picks another), each contender as its own process, rounds alternating (ROUNDS,
# default 8). Usage: bench/ab-aggregator.sh OUT NAME=BINARY... [-- HARNESS ARGUMENTS] (e.g.
# `-- --datapoints 2000000`); a contender named `plain` runs
# its binary without the aggregation rules (relaying the same input), every other one with them
# (bench/relays/anthracite.toml). Prints the harness's comparison (CPU per datapoint until the
# output settles, from the threads' nanoseconds on CPU) and, per contender, each round's
# whole-life CPU seconds from wait4 (bench/lifetime-cpu.py) with their median. The harness is target/release/anthracite
# (HARNESS overrides it). docs/benchmarks.md, "The heavy shape", has its figures.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$1"
shift
mkdir -p "$out"
rm -f "$out"/cpu.*
plain="$out/anthracite-plain.toml"
sed 's/^{aggregation_toml}//' bench/relays/anthracite.toml >"$plain"
contenders=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    arg="$1"
    shift
    name="${arg%%=*}" bin="${arg#*=}"
    wrap="$PWD/bench/lifetime-cpu.py $out/cpu.$name"
    if [ "$name" = plain ]; then
        contenders+=("$name=$wrap $bin run --config {config:$plain}")
    else
        contenders+=("$name=$wrap $bin run --config {config:bench/relays/anthracite.toml}")
    fi
done
[ "${1:-}" = -- ] && shift
"${HARNESS:-target/release/anthracite}" bench "bench/scenarios/${SCENARIO:-aggregate-heavy}.toml" \
    --rounds "${ROUNDS:-8}" --no-progress --compare "${contenders[@]}" --json "$out/ab.json" \
    "$@" >"$out/ab.log" 2>&1
sed -n '/^compare/,$p' "$out/ab.log"
for f in "$out"/cpu.*; do
    sort -n "$f" | awk -v name="${f##*/cpu.}" '
        { v[NR] = $1; line = line " " $1 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "whole-life CPU-s %s:%s (median %.4f)\n", name, line, m }'
done
