//! Memory the relay holds for names is bounded by configuration, however many distinct names
//! clients send (before the fix: 50k distinct 16 KB names on one connection held 819 MB in the old
//! per-connection route caches, and kept it after the client left).

use crate::support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use anthracite::unstable::relay::route_cache;
use support::relay::{TestRelay, config_for};
use support::sink::{CountingSink, SinkProtocol};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn route_cache_memory_bounded_under_distinct_long_names() {
    const BUDGET: usize = 4 << 20;
    const NAMES: usize = 600;
    let sink = CountingSink::start("a", SinkProtocol::Pickle);
    let relay = TestRelay::start(&config_for(
        &[format!("{}:a", sink.addr())],
        &format!(
            "[router]\nroute_cache_bytes = {BUDGET}\n[listen]\nmax_line_length = 20000\nmax_name_length = 20000\n"
        ),
    ));
    let cache = route_cache(&relay.handle);
    assert_eq!(cache.budget(), BUDGET);
    let mut conn = TcpStream::connect(relay.line).expect("connect line receiver");
    let mut sent = 0;
    let mut most_cached = 0;
    // Every name twice (a name is stored at its second sighting): 1,200 lines of 16 KiB,
    // about 19 MiB of names through a 4 MiB cache.
    for pass in 0..2 {
        for chunk in (0..NAMES).collect::<Vec<_>>().chunks(50) {
            let mut bytes = Vec::new();
            for &i in chunk {
                let mut name = format!("hostile.{i:05}.");
                name.push_str(&"x".repeat(16 * 1024 - name.len()));
                bytes.extend_from_slice(format!("{name} {pass} 1700000000\n").as_bytes());
            }
            conn.write_all(&bytes).expect("write");
            sent += chunk.len();
            assert_eq!(sink.wait_for_count(sent, WAIT), sent, "delivered so far");
            let accounted = cache.accounted_bytes();
            assert!(
                accounted <= BUDGET,
                "route cache holds {accounted} bytes, over its {BUDGET}-byte budget"
            );
            most_cached = most_cached.max(cache.len());
        }
    }
    drop(conn);
    // The long names were cached (the bound is not met by refusing them) and evicted (they
    // do not all fit).
    assert!(most_cached > 50, "at most {most_cached} names cached");
    assert!(
        cache.len() < NAMES,
        "{} of {NAMES} names cached",
        cache.len()
    );
    assert!(cache.accounted_bytes() <= BUDGET);
}
