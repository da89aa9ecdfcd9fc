# Sourced by the bench scripts: the carbon-c-relay 3.7.3 contender for `anthracite bench
# --compare`, on bench/relays/carbon-c-relay.conf (the scenario's routing and aggregation).
# carbon-c-relay sometimes segfaults right after it starts listening (kernel log:
# "carbon-c-relay: segfault at 8 … in libc.so.6", before "starting statistics collector"),
# which would abort the whole comparison; the wrapper starts it again (up to 5 times) until it
# is still running 0.3 s later, then waits for it. The harness measures the process tree, so
# the wrapper shell's share is counted (it sleeps).
# shellcheck shell=bash
C_RELAY="carbon-c-relay=sh -c 'for try in 1 2 3 4 5; do carbon-c-relay -f {config:bench/relays/carbon-c-relay.conf} -p {line_port} -w 2 -q 4000000 & pid=\$!; sleep 0.3; if kill -0 \$pid 2>/dev/null; then wait \$pid; exit; fi; done; exit 1'"
export C_RELAY
