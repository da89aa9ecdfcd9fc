//! carbon.proto (`Payload` of `Metric`s of `Point`s), declared here so that the sink does not
//! share the relay's protobuf codec.

/// One datapoint of a metric.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Point {
    /// Seconds since the epoch.
    #[prost(uint32, tag = "1")]
    pub timestamp: u32,
    /// The value.
    #[prost(double, tag = "2")]
    pub value: f64,
}

/// A metric path and its datapoints.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    /// The path.
    #[prost(string, tag = "1")]
    pub metric: String,
    /// Its datapoints.
    #[prost(message, repeated, tag = "2")]
    pub points: Vec<Point>,
}

/// One frame's message.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Payload {
    /// The metrics.
    #[prost(message, repeated, tag = "1")]
    pub metrics: Vec<Metric>,
}
