#!/usr/bin/env bash
# Issue 24's cost curves: relay CPU-s per 1M datapoints as the configuration grows, anthracite
# (release build, as a process) beside carbon-c-relay 3.7.3 (apt-get install carbon-c-relay)
# in one --compare run per point, rounds alternating. Points:
#   rules 10 / 100 / 1000 (1 sink; unanchored `host-NNNN\.` patterns: names of the first hosts
#     match their rule, the rest fall through every rule to the default, as cold names do),
#   destinations 2 / 8 / 32 / 128 with replication 1 / 2 / 3 (carbon_ch).
# Each point renders its own relay configs into $1 (default bench-results/cost) and runs
# bench/scenarios/distinct-3m.toml (3M distinct names, 4 connections) with that many sinks.
# The machine is shared with other builders: compare the ratios of one point, not absolute
# figures across points run at different times. RULES, DESTINATIONS, REPLICATION narrow it.
# Usage: bench/cost-curves.sh [out] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bench-results/cost}"
rounds="${2:-2}"
mkdir -p "$out"
bin="${ANTHRACITE_BIN:-target/release/anthracite}"

rules_toml() { # $1 = rule count
    printf '[listen]\nline_tcp = "127.0.0.1:{line_port}"\npickle_tcp = "127.0.0.1:{pickle_port}"\n'
    printf '[router]\nmethod = "rules"\n'
    printf '[destinations]\nservers = [{toml_servers}]\nprotocol = "{sink_protocol}"\n'
    printf '[telemetry]\ninterval_secs = 0\n'
    for ((r = 0; r < $1; r++)); do
        printf '[[rules]]\npattern = "host-%04d\\\\."\ndestinations = [{toml_servers}]\n' "$r"
    done
    printf '[[rules]]\ndefault = true\ndestinations = [{toml_servers}]\n'
}
rules_c() {
    printf 'cluster bench\n    forward\n        {c_relay_servers}\n    ;\n'
    for ((r = 0; r < $1; r++)); do
        printf 'match host-%04d\\.\n    send to bench\n    stop\n    ;\n' "$r"
    done
    printf 'match *\n    send to bench\n    stop\n    ;\n'
}
ring_toml() { # $1 = replication
    printf '[listen]\nline_tcp = "127.0.0.1:{line_port}"\npickle_tcp = "127.0.0.1:{pickle_port}"\n'
    printf '[router]\nreplication_factor = %d\n' "$1"
    printf '[destinations]\nservers = [{toml_servers}]\nprotocol = "{sink_protocol}"\n'
    printf '[telemetry]\ninterval_secs = 0\n'
}
ring_c() {
    printf 'cluster bench\n    carbon_ch replication %d\n        {c_relay_servers}\n    ;\n' "$1"
    printf 'match *\n    send to bench\n    stop\n    ;\n'
}
point() { # name sinks anthracite-template c-relay-template
    local name="$1" sinks="$2" a="$3" c="$4"
    echo "== $name"
    "$bin" bench bench/scenarios/distinct-3m.toml --sinks "$sinks" --rounds "$rounds" \
        --drain-timeout 120 --no-progress --json "$out/$name.json" --compare \
        "anthracite=$bin run --config {config:$a}" \
        "carbon-c-relay=carbon-c-relay -f {config:$c} -p {line_port} -w 2 -q 4000000" \
        >"$out/$name.log" 2>&1 || echo "(failed: see $out/$name.log)"
    sed -n '/^compare/,$p' "$out/$name.log"
}
for n in ${RULES:-10 100 1000}; do
    rules_toml "$n" >"$out/rules-$n.toml"
    rules_c "$n" >"$out/rules-$n.conf"
    point "rules-$n" 1 "$out/rules-$n.toml" "$out/rules-$n.conf"
done
for d in ${DESTINATIONS:-2 8 32 128}; do
    for r in ${REPLICATION:-1 2 3}; do
        [ "$r" -le "$d" ] || continue
        ring_toml "$r" >"$out/ring-r$r.toml"
        ring_c "$r" >"$out/ring-r$r.conf"
        point "dest-$d-r$r" "$d" "$out/ring-r$r.toml" "$out/ring-r$r.conf"
    done
done
