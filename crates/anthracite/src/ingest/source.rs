//! Where datapoints enter the relay. The source decides behaviour (UDP cannot wait; the
//! relay's own metrics skip the white/blacklists and the timestamp resolution) and is the
//! `source` label of the ingest counters.

/// Where datapoints entered the relay (the `source` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// Plaintext over TCP.
    LineTcp,
    /// Plaintext over UDP.
    LineUdp,
    /// Pickle over TCP.
    PickleTcp,
    /// carbon's protobuf over TCP.
    ProtobufTcp,
    /// The relay's own self-metrics.
    Internal,
    /// An embedding program or a non-socket source (e.g. Kinesis).
    Embedded,
}

impl Source {
    /// Every source.
    pub const ALL: [Source; 6] = [
        Source::LineTcp,
        Source::LineUdp,
        Source::PickleTcp,
        Source::ProtobufTcp,
        Source::Internal,
        Source::Embedded,
    ];

    /// The `source` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Source::LineTcp => "line_tcp",
            Source::LineUdp => "line_udp",
            Source::PickleTcp => "pickle_tcp",
            Source::ProtobufTcp => "protobuf_tcp",
            Source::Internal => "internal",
            Source::Embedded => "embedded",
        }
    }
}
