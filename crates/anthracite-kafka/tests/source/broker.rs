//! The test support itself: the broker starts, takes a topic, and round-trips a message.

use std::time::Duration;

use anthracite_testkit::kafka::broker::{Broker, exclusive};
use anthracite_testkit::kafka::client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_starts_and_round_trips_a_message() {
    let _turn = exclusive().await;
    let broker = Broker::shared();
    broker.create_topic("support-smoke", 2).await;
    let p = client::producer(&broker.bootstrap);
    client::send(&p, "support-smoke", 1, b"a.b 1 1700000000\n", None).await;
    let got = client::read_all(
        &broker.bootstrap,
        "support-smoke",
        1,
        Duration::from_secs(60),
    );
    assert_eq!(got[0].0, 1);
    assert_eq!(got[0].2, b"a.b 1 1700000000\n");
}
