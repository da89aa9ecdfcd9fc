use std::sync::Arc;

use bytes::BytesMut;

use super::*;
use crate::protocol::line::LineFramer;
use crate::queue::{DestinationStats, QueueLimits};
use crate::router::{DestinationSpec, HashType, RelayMethod, RouterSpec};

fn pipeline(route_cache_bytes: usize) -> Pipeline {
    pipeline_rf(route_cache_bytes, 2)
}

fn pipeline_rf(route_cache_bytes: usize, replication_factor: usize) -> Pipeline {
    pipeline_over(
        &["127.0.0.1:2104:a", "127.0.0.1:2204:b"],
        route_cache_bytes,
        replication_factor,
    )
}

fn pipeline_over(
    destinations: &[&str],
    route_cache_bytes: usize,
    replication_factor: usize,
) -> Pipeline {
    let destinations: Vec<DestinationSpec> = destinations
        .iter()
        .map(|d| DestinationSpec::parse(d).expect("destination"))
        .collect();
    let router = Router::new(RouterSpec {
        method: RelayMethod::ConsistentHashing,
        hash_type: HashType::CarbonCh,
        replication_factor,
        diverse_replicas: false,
        destinations: destinations.clone(),
        rules: Vec::new(),
        aggregation_rules: Vec::new(),
        c_relay: None,
    })
    .expect("router");
    let queues: Arc<[Arc<DestinationQueue>]> = destinations
        .iter()
        .map(|d| {
            let stats = Arc::new(DestinationStats::new(d.to_string()));
            Arc::new(DestinationQueue::new(QueueLimits::default(), stats))
        })
        .collect();
    Pipeline::new(
        Arc::new(router),
        queues,
        Arc::new(IngestStats::new()),
        route_cache_bytes,
    )
}

/// Everything the queues hold, per destination, as (name, timestamp, value).
fn drain(p: &Pipeline) -> Vec<Vec<(Vec<u8>, f64, f64)>> {
    p.queues()
        .iter()
        .map(|q| {
            let mut out = Vec::new();
            while let Some(b) = q.try_pop() {
                out.extend(b.iter().map(|d| (d.name.to_vec(), d.timestamp, d.value)));
            }
            out
        })
        .collect()
}

/// In runs, `carbon_ch` names that fit two MD5 blocks are routed by computation and never
/// stored, longer ones through the cache: every datapoint lands where the router sends its
/// name (one copy, two destinations, so a wrong route shows), and after three sightings the
/// cache holds exactly the long names.
#[test]
fn runs_compute_short_names_and_cache_long_ones() {
    let p = pipeline_rf(1 << 20, 1);
    let router = p.route_cache().router().clone();
    // One MD5 block, exactly one, two, exactly two, more.
    let names: Vec<String> = (0..300)
        .map(|i| match i % 5 {
            0 => format!("short.{i}"),
            1 => format!("edge.{i:0>60}")[..55].to_string(),
            2 => format!("two.{i}.{}", "y".repeat(60)),
            3 => format!("edge2.{i:0>120}")[..119].to_string(),
            _ => format!("long.{i}.{}", "x".repeat(120)),
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut ingestor = p.ingestor(Source::LineTcp);
    for round in 0..3 {
        let points: Vec<(&[u8], f64, f64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_bytes(), 1_700_000_000.0, (round * 1000 + i) as f64))
            .collect();
        ingestor.push_run(&points);
    }
    rt.block_on(ingestor.flush());
    let mut want = vec![Vec::new(); 2];
    for round in 0..3 {
        for (i, n) in names.iter().enumerate() {
            let mut route = Vec::new();
            router.route_into(n.as_bytes(), &mut route);
            for d in route {
                want[usize::from(d)].push((
                    n.clone().into_bytes(),
                    1_700_000_000.0,
                    (round * 1000 + i) as f64,
                ));
            }
        }
    }
    let got = drain(&p);
    assert!(
        got.iter().all(|d| !d.is_empty()),
        "both destinations get names"
    );
    assert_eq!(got, want);
    let cache = p.route_cache();
    for n in &names {
        assert_eq!(
            cache.is_cached(n.as_bytes()),
            n.len() > crate::router::md5x::MAX_KEY,
            "{n} ({} bytes)",
            n.len()
        );
    }
    assert_eq!(cache.len(), 60);
}

/// The batched path (`lines`, what TCP connections use) routes, orders and counts exactly as
/// the line-at-a-time path, bad lines and repeated names included, with the cache on or off;
/// names from 3 to 70 bytes, so the misses of a run go through both the eight-at-a-time MD5
/// (up to 55 bytes) and the one-at-a-time one.
#[test]
fn batched_lines_match_line_at_a_time() {
    let mut text = Vec::new();
    for i in 0..500 {
        text.extend_from_slice(format!("m.{} {i}.5 1700000000\n", i % 37).as_bytes());
        if i % 3 == 0 {
            let name = format!("long.{}.{}", "z".repeat(i % 61), i % 11);
            text.extend_from_slice(format!("{name} {i} 1700000000\n").as_bytes());
        }
        match i % 50 {
            7 => text.extend_from_slice(b"bad line\n"),
            8 => text.extend_from_slice(b"m.x nan 1700000000\n"),
            9 => text.extend_from_slice(b" 1 2\n"),
            10 => text.extend_from_slice(format!("{} 1 2\n", "y".repeat(200)).as_bytes()),
            _ => {}
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for cache in [0, 1 << 20] {
        let (batched, single) = (pipeline(cache), pipeline(cache));
        let mut framer = LineFramer::new(100);
        let mut ingestor = batched.ingestor(Source::LineTcp);
        let mut buf = BytesMut::from(&text[..]);
        framer.feed_batched(&mut buf, |lines| ingestor.lines(lines));
        rt.block_on(ingestor.flush());
        let mut framer = LineFramer::new(100);
        let mut one = single.ingestor(Source::LineTcp);
        let mut buf = BytesMut::from(&text[..]);
        framer.feed(&mut buf, |line| {
            let _ = match line {
                Ok(l) => one.line(l),
                Err(r) => one.reject(r),
            };
        });
        rt.block_on(one.flush());
        let got = drain(&batched);
        assert_eq!(got, drain(&single), "cache {cache}");
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 2 * 667);
        let counters = batched.stats().snapshot();
        assert_eq!(counters, single.stats().snapshot());
        assert_eq!(counters.received, 667);
        assert_eq!(counters.invalid.total(), 40, "{:?}", counters.invalid);
    }
}

/// What a source discards (its read is no longer its to deliver) reaches no queue and is
/// counted nowhere; what it feeds afterwards flushes as usual.
#[test]
fn discard_drops_what_was_fed_since_the_last_flush_uncounted() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let p = pipeline(0);
    let mut ingestor = p.ingestor(Source::LineTcp);
    let fed = ingestor.message(b"a.b 1 1700000000\nc.d 2 1700000000\nbad\n", 100);
    assert_eq!((fed.lines, fed.invalid), (3, 1));
    assert_eq!(ingestor.discard(), 2);
    assert_eq!(ingestor.pending_datapoints(), 0);
    rt.block_on(ingestor.flush());
    assert!(drain(&p).iter().all(Vec::is_empty), "nothing queued");
    let counters = p.stats().snapshot();
    assert_eq!((counters.received, counters.invalid.total()), (0, 0));
    ingestor.message(b"e.f 3 1700000000\n", 100);
    rt.block_on(ingestor.flush());
    assert_eq!(drain(&p).iter().map(Vec::len).sum::<usize>(), 2, "RF 2");
    assert_eq!(p.stats().snapshot().received, 1);
}

/// An `any_of` cluster passes over a member whose memory queue is full when it has no spill
/// log: the member that has room takes the line instead of it being dropped.
#[test]
fn any_of_passes_over_a_member_whose_queue_is_full_without_spill() {
    use crate::router::c_relay::ring::fnv1a_32;
    use crate::router::c_relay::{
        Cluster, ClusterKind, Dest, Dests, Matcher, Program, Route, Server, ServerProto,
    };
    // `cluster c any_of 127.0.0.1:2104 127.0.0.1:2204; match * send to c;`
    let servers: Vec<Server> = [2104, 2204]
        .iter()
        .map(|&port| Server {
            ip: "127.0.0.1".into(),
            port,
            instance: None,
            proto: ServerProto::Tcp,
            syslog: false,
            transport: Default::default(),
        })
        .collect();
    let program = Program {
        servers,
        clusters: vec![Cluster {
            name: "c".into(),
            kind: ClusterKind::AnyOf,
            members: vec![0, 1],
        }],
        routes: vec![Route {
            pattern: None,
            matcher: Matcher::All,
            nmatch: 0,
            dests: Arc::new(Dests {
                list: vec![Dest::Cluster(0)],
            }),
            stop: false,
            masq: None,
        }],
        ..Program::default()
    };
    let router = Router::new(RouterSpec {
        destinations: ["127.0.0.1:2104", "127.0.0.1:2204"]
            .iter()
            .map(|d| DestinationSpec::parse(d).expect("destination"))
            .collect(),
        c_relay: Some(crate::router::CRelayProgram::new(Arc::new(program), 10, 10)),
        ..RouterSpec::default()
    })
    .expect("router");
    let limits = QueueLimits {
        max_datapoints: 2,
        ..QueueLimits::default()
    };
    let queues: Arc<[Arc<DestinationQueue>]> = router
        .destinations()
        .iter()
        .map(|d| {
            let stats = Arc::new(DestinationStats::new(d.to_string()));
            Arc::new(DestinationQueue::new(limits, stats))
        })
        .collect();
    let p = Pipeline::new(
        Arc::new(router),
        queues,
        Arc::new(IngestStats::new()),
        1 << 20,
    );
    // Five names `any_of` puts on the first member: two fit there, two on the other, the
    // last fits nowhere.
    let names: Vec<String> = (0..)
        .map(|i| format!("m.{i}"))
        .filter(|n| fnv1a_32(n.as_bytes()).is_multiple_of(2))
        .take(5)
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut ingestor = p.ingestor(Source::LineTcp);
    for n in &names {
        ingestor.line(format!("{n} 1 1700000000").as_bytes());
        rt.block_on(ingestor.flush());
    }
    let held: Vec<usize> = p.queues().iter().map(|q| q.queued()).collect();
    let dropped: u64 = p
        .queues()
        .iter()
        .map(|q| q.stats().snapshot().dropped_total())
        .sum();
    assert_eq!((held, dropped), (vec![2, 2], 1));
}

/// A socket reader that reads again before flushing while `read_room` allows keeps what
/// waits for the flush within one read's bound: a read's bytes of the shortest lines,
/// per destination a datapoint goes to. The shortest lines leave no room after one full
/// read; longer ones leave room for more (with 32 destinations, whose batches stay small),
/// and the bound still holds after each read.
#[test]
fn reads_before_a_flush_stay_within_one_reads_bound() {
    let names: Vec<String> = (0..32)
        .map(|i| format!("127.0.0.1:{}:d{i}", 3000 + i))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let p = pipeline_over(&names, 1 << 20, 2);
    let bound = READ_BYTES * (POINT_OVERHEAD + 1) / SHORTEST_LINE * 2;
    for (line, min_reads) in [("a 1 1\n", 1), ("a.b 1 1\n", 1), (LONG_LINE, 4)] {
        let mut ingestor = p.ingestor(Source::LineTcp);
        let mut framer = LineFramer::new(4096);
        let mut buf = BytesMut::new();
        let mut reads = 0;
        let mut room = READ_BYTES;
        while room >= line.len() && reads < 4 {
            // A read of whole lines as large as the room allows.
            let lines = room / line.len();
            buf.extend_from_slice(line.repeat(lines).as_bytes());
            framer.feed_batched(&mut buf, |l| ingestor.lines(l));
            reads += 1;
            let pending = ingestor.pending.bytes();
            assert!(
                pending <= bound,
                "{line:?} read {reads}: {pending} > {bound}"
            );
            room = ingestor.read_room(READ_BYTES, buf.len());
        }
        assert!(reads >= min_reads, "{line:?}: {reads} reads");
        if line.len() == SHORTEST_LINE {
            assert!(
                room < SHORTEST_LINE,
                "room for another line after one full read: {room}"
            );
        }
    }
}

const LONG_LINE: &str = "servers.host-0042.cpu.total.user.percent 12.5 1700000000\n";

/// With few destinations a read's batches are already large: the reader flushes after one
/// read, so a thousand clients ahead of the relay do not each hold several reads.
#[test]
fn with_few_destinations_a_reader_flushes_after_each_full_read() {
    let p = pipeline_rf(1 << 20, 1);
    let mut ingestor = p.ingestor(Source::LineTcp);
    let mut framer = LineFramer::new(4096);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(LONG_LINE.repeat(READ_BYTES / LONG_LINE.len()).as_bytes());
    framer.feed_batched(&mut buf, |l| ingestor.lines(l));
    assert!(ingestor.pending.copies() >= 2 * READ_AHEAD_BATCH);
    assert_eq!(ingestor.read_room(READ_BYTES, buf.len()), 0);
}

/// A socket read's size (the receivers read 64 KiB; this layer does not import them).
const READ_BYTES: usize = 64 << 10;
