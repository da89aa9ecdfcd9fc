#!/usr/bin/env bash
# The aggregation cost curves of docs/benchmarks.md: `anthracite bench --sweep` over the rules
# matched per datapoint (bench/scenarios/aggregate-matched.toml), the output series
# (aggregate-series.toml) and WRITE_BACK_FREQUENCY (aggregate-write-back.toml), anthracite as
# its own process (bench/relays/anthracite.toml) beside, where a point is feasible:
#   - anthracite relaying the same input without aggregation (plain; matched, series),
#   - carbon-c-relay 3.7.3 with the rules as `aggregate` statements (matched, series; it has
#     no write-back: it sends an interval once, when it expires),
#   - carbon-aggregator.py 1.1.10 with the same rules file (matched, write-back; at about 100
#     CPU-s per million datapoints its 1M-series point would take it longer than the rest of
#     the sweeps together).
# Needs a release build (BIN=path) and the carbon 1.1.10 venv (`cargo test --test carbon`
# once, or VENV=path). Logs, JSON and SVG go to $1 (default bench-results/aggregation-sweeps);
# SWEEPS picks among "matched series write-back"; ROUNDS=n sets the rounds per point (default
# 1); further arguments go to `anthracite bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results/aggregation-sweeps}"
shift || true
mkdir -p "$out"
. bench/aggregator-relays.sh
for s in ${SWEEPS:-matched series write-back}; do
    case "$s" in
    matched) relays=("$A" "$P" "$C" "$G") ;;
    series) relays=("$A" "$P" "$C") ;;
    write-back) relays=("$A" "$G") ;;
    *) echo "unknown sweep $s" >&2; exit 1 ;;
    esac
    echo "== aggregate-$s"
    "$bin" bench "bench/scenarios/aggregate-$s.toml" --sweep --rounds "${ROUNDS:-1}" --no-progress \
        --compare "${relays[@]}" --json "$out/$s.json" --svg "$out/$s.svg" "$@" >"$out/$s.log" 2>&1 ||
        echo "(failed: see $out/$s.log)"
    sed -n '/^cost sweep/,$p' "$out/$s.log"
done
