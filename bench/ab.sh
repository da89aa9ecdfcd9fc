#!/usr/bin/env bash
# The guard: an A/B of two anthracite builds on every workload of the performance table
# (burst-3m, distinct-3m, many-clients-1k, pickle-in, destinations-32-r2), each as its own
# process on relay.toml.example's settings (bench/relays/anthracite-example.toml; with the
# scenario's routing, bench/relays/anthracite-example-routing.toml), rounds alternating, then
# NEW's CPU per datapoint over OLD's per workload (median of the rounds' ratios, with a 90 %
# bootstrap interval for it), flagging each above ×1.05, each whose interval is too wide to see
# 5 %, and each round that lost datapoints. A benchmark, not a test: it exits 0 either
# way (1 only when a run failed), and the ratios are what carry over a shared machine.
# Usage: bench/ab.sh OLD_BINARY NEW_BINARY [out] (default bench-results/ab);
# ROUNDS=n sets the rounds (default 4: with an even count each build runs first in half of
# them), SCENARIOS="a b" the workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
old="$1" new="$2" out="${3:-bench-results/ab}"
mkdir -p "$out"
scenarios="${SCENARIOS:-burst-3m distinct-3m many-clients-1k pickle-in destinations-32-r2}"
failed=0
for s in $scenarios; do
    echo "== $s"
    config=bench/relays/anthracite-example.toml
    if grep -q '^\[routing\]' "bench/scenarios/$s.toml"; then
        config=bench/relays/anthracite-example-routing.toml
    fi
    rm -f "$out/$s.json"
    "$new" bench "bench/scenarios/$s.toml" --rounds "${ROUNDS:-4}" --drain-timeout 120 \
        --no-progress --json "$out/$s.json" --compare \
        "new=$new run --config {config:$config}" \
        "old=$old run --config {config:$config}" \
        >"$out/$s.log" 2>&1 || { echo "(failed: see $out/$s.log)"; failed=1; }
    sed -n '/^compare/,$p' "$out/$s.log"
done
echo "== new / old, CPU per datapoint (median of rounds [its 90 % interval]; > 1.05 flagged)"
python3 - "$out" $scenarios <<'EOF'
import json, random, statistics, sys
out, scenarios = sys.argv[1], sys.argv[2:]
for s in scenarios:
    try:
        with open(f"{out}/{s}.json") as f:
            entries = json.load(f)["comparison"]["entries"]
    except (OSError, KeyError, TypeError, ValueError):
        print(f"  {s:<22} no result")
        continue
    by = {(e["name"], e["round"]): e for e in entries}
    rounds = sorted({e["round"] for e in entries})
    ratios = [by[("new", r)]["cpu_secs_per_million"] / by[("old", r)]["cpu_secs_per_million"]
              for r in rounds
              if ("new", r) in by and ("old", r) in by
              and by[("new", r)].get("cpu_secs_per_million")
              and by[("old", r)].get("cpu_secs_per_million")]
    lost = sum(max(e.get("lost", 0), 0) for e in entries)
    if not ratios:
        print(f"  {s:<22} no CPU figures")
        continue
    m = statistics.median(ratios)
    # How far the median could move with other rounds from the same host: the 5th to 95th
    # percentile of the medians of rounds drawn again with replacement (a fixed seed, so the
    # same rounds print the same interval).
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    lo, hi = boots[100], boots[1899]
    flag = "  ABOVE ×1.05" if m > 1.05 else ""
    if hi - lo > 0.10:
        flag += "  (interval wider than ±5 %: run more rounds)"
    if lost:
        flag += f"  LOST {lost}"
    rs = " ".join(f"{r:.2f}" for r in ratios)
    print(f"  {s:<22} ×{m:.3f} [{lo:.3f}–{hi:.3f}] (rounds {rs}){flag}")
EOF
exit "$failed"
