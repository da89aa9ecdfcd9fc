#!/usr/bin/env bash
# A/B of two anthracite builds on the earlier workloads (burst-3m, distinct-3m, many-clients-1k,
# pickle-in), each as its own process on relay.toml.example's settings
# (bench/relays/anthracite-example.toml), rounds alternating, so a change can be shown not to
# regress them. Usage: bench/ab.sh OLD_BINARY NEW_BINARY [out] (default bench-results/ab);
# ROUNDS=n sets the rounds (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
old="$1" new="$2" out="${3:-bench-results/ab}"
mkdir -p "$out"
for s in ${SCENARIOS:-burst-3m distinct-3m many-clients-1k pickle-in}; do
    echo "== $s"
    "$new" bench "bench/scenarios/$s.toml" --rounds "${ROUNDS:-3}" --drain-timeout 120 \
        --no-progress --json "$out/$s.json" --compare \
        "new=$new run --config {config:bench/relays/anthracite-example.toml}" \
        "old=$old run --config {config:bench/relays/anthracite-example.toml}" \
        >"$out/$s.log" 2>&1 || echo "(failed: see $out/$s.log)"
    sed -n '/^compare/,$p' "$out/$s.log"
done
