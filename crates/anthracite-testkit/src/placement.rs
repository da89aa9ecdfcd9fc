//! Where the real carbon 1.1.10 routes names: `carbon.routers.ConsistentHashingRouter` itself,
//! asked once for a whole batch of names (JSON over stdin/stdout).

use std::time::Duration;

use serde_json::json;

use super::venv::run_python_json;

const SCRIPT: &str = r#"
import json, sys
from carbon.util import parseDestinations
from carbon.routers import ConsistentHashingRouter

req = json.loads(sys.stdin.buffer.read().decode('utf-8'))

class Settings(object):
    pass

settings = Settings()
settings.REPLICATION_FACTOR = req['rf']
settings.DIVERSE_REPLICAS = req['diverse']
settings.ROUTER_HASH_TYPE = req['hash_type']
# As carbon.conf reads DESTINATIONS: split on commas, strip.
dests = parseDestinations([d.strip() for d in req['destinations'].split(',') if d.strip()])
router = ConsistentHashingRouter(settings)
for d in dests:
    router.addDestination(d)
index = {}
for n, (server, port, instance) in enumerate(dests):
    index.setdefault((server, instance), n)
out = [[index[(s, i)] for (s, p, i) in router.getDestinations(name)] for name in req['names']]
sys.stdout.write(json.dumps(out))
"#;

/// For each of `names`, the indices (into `destinations_conf`'s comma-separated list, in
/// DESTINATIONS order) of the destinations carbon-relay 1.1.10 with
/// RELAY_METHOD = consistent-hashing would send it to, in carbon's yield order.
///
/// `destinations_conf` is the DESTINATIONS text as in carbon.conf
/// (`"127.0.0.1:2104:a, 127.0.0.1:2204:b"`), `hash_type` is ROUTER_HASH_TYPE (`carbon_ch`,
/// `fnv1a_ch`, `mmh3_ch`), `rf` REPLICATION_FACTOR, `diverse` DIVERSE_REPLICAS.
pub fn carbon_ring_placement(
    destinations_conf: &str,
    hash_type: &str,
    names: &[String],
    rf: usize,
    diverse: bool,
) -> Vec<Vec<usize>> {
    let input = json!({
        "destinations": destinations_conf,
        "hash_type": hash_type,
        "names": names,
        "rf": rf,
        "diverse": diverse,
    });
    let out: Vec<Vec<usize>> = run_python_json(
        "carbon ConsistentHashingRouter placement",
        SCRIPT,
        &input,
        Duration::from_secs(120),
    );
    assert_eq!(
        out.len(),
        names.len(),
        "placement script answered for a different number of names"
    );
    out
}
