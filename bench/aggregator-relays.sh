# Sourced by the aggregation bench scripts: the contenders for `anthracite bench --compare`.
# A: anthracite aggregating (bench/relays/anthracite.toml), P: the same relay without its
# aggregation rules (plain relaying of the same input), C: carbon-c-relay 3.7.3 with the rules
# as `aggregate` statements, G: carbon-aggregator.py 1.1.10 from the venv the test suite
# installs (VENV overrides it), on the same rules file. BIN overrides the release binary.
# shellcheck shell=bash
bin="${BIN:-target/release/anthracite}"
venv="${VENV:-$PWD/target/tmp/carbon-1.1.10-venv}"
[ -x "$venv/bin/carbon-aggregator.py" ] || {
    echo "no carbon 1.1.10 venv at $venv: run cargo test --test carbon once, or set VENV" >&2
    exit 1
}
plain="$(mktemp -d)/anthracite-plain.toml"
sed 's/^{aggregation_toml}//' bench/relays/anthracite.toml >"$plain"
A="anthracite=$bin run --config {config:bench/relays/anthracite.toml}"
P="anthracite-plain=$bin run --config {config:$plain}"
. bench/c-relay.sh
C="$C_RELAY"
G="carbon-aggregator=sh -c 'touch {config_dir}/storage-schemas.conf && exec $venv/bin/python $venv/bin/carbon-aggregator.py --config={config:bench/relays/carbon-aggregator.conf} --rules={config:bench/relays/aggregation-rules.conf} --nodaemon --pidfile={config_dir}/agg.pid --logdir={config_dir} start'"
