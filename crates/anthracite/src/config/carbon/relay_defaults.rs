//! carbon-relay's defaults: what `anthracite` runs on when it is given no configuration.
//!
//! They are a carbon.conf, imported like any other, so the queue limits, the flow control and
//! the self-metrics are exactly what the drop-in import makes of carbon's own settings.

use super::{CarbonOptions, from_text};
use crate::config::Config;

/// The name the defaults go by in logs and in `anthracite check` (where a file name would be).
pub(crate) const SOURCE: &str = "<carbon-relay 1.1.10 defaults>";

/// The admin listener the defaults add (carbon has none): loopback only, as in
/// `relay.toml.example`.
const ADMIN_LISTEN: &str = "127.0.0.1:8080";

/// carbon 1.1.10's `conf/carbon.conf.example`, section `[relay]`: every setting the example
/// makes that anthracite implements, as written there, except `RELAY_METHOD` (the example's
/// `rules`; see [`Config::carbon_relay_defaults`]). Left out, as they change when datapoints
/// leave but not what arrives where: `TIME_TO_DEFER_SENDING = 0.0001`, `USE_RATIO_RESET =
/// False`, `MIN_RESET_STAT_FLOW = 1000`, `MIN_RESET_RATIO = 0.9`, `MIN_RESET_INTERVAL = 121`.
const CARBON_CONF: &str = "\
[relay]
LINE_RECEIVER_INTERFACE = 0.0.0.0
LINE_RECEIVER_PORT = 2013
PICKLE_RECEIVER_INTERFACE = 0.0.0.0
PICKLE_RECEIVER_PORT = 2014
PICKLE_RECEIVER_MAX_LENGTH = 1048576
RELAY_METHOD = consistent-hashing
REPLICATION_FACTOR = 1
DESTINATIONS = 127.0.0.1:2004
MAX_QUEUE_SIZE = 10000
MAX_DATAPOINTS_PER_MESSAGE = 500
QUEUE_LOW_WATERMARK_PCT = 0.8
USE_FLOW_CONTROL = True
";

/// See [`Config::carbon_relay_defaults`].
pub(crate) fn relay_defaults() -> Config {
    // The text is a constant that reads no file (no rules, no lists) and the unit tests below
    // validate it, so neither step can fail at run time.
    let import = from_text(CARBON_CONF, &CarbonOptions::new(SOURCE))
        .expect("carbon-relay's built-in carbon.conf imports");
    let mut raw = import.config.resolved;
    raw.admin.listen = ADMIN_LISTEN.to_owned();
    Config::from_raw(raw, SOURCE).expect("carbon-relay's defaults with an admin listener validate")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::destination::OutputProtocol;
    use crate::queue::WhenFull;
    use crate::router::RelayMethod;
    use std::time::Duration;

    #[test]
    fn defaults_are_carbon_conf_examples_relay_section_plus_admin() {
        let c = Config::carbon_relay_defaults();
        assert_eq!(c.listen.line_tcp, "0.0.0.0:2013".parse().ok());
        assert_eq!(c.listen.pickle_tcp, "0.0.0.0:2014".parse().ok());
        assert_eq!(c.listen.line_udp, None);
        assert_eq!(c.listen.protobuf_tcp, None);
        assert_eq!(c.listen.max_pickle_frame, 1_048_576);
        assert_eq!(c.destination_names(), ["127.0.0.1:2004"]);
        let d = &c.destinations[0];
        assert_eq!(d.protocol, OutputProtocol::Pickle);
        assert_eq!(d.queue.max_datapoints, 10_000);
        assert_eq!(d.queue.when_full, WhenFull::Block);
        assert_eq!(d.max_datapoints_per_message, 500);
        assert!(d.spill.is_none());
        assert_eq!(c.router.method, RelayMethod::ConsistentHashing);
        assert_eq!(c.router.replication_factor, 1);
        assert_eq!(c.telemetry.interval, Some(Duration::from_secs(60)));
        assert_eq!(c.admin_listen, ADMIN_LISTEN.parse().ok());
        assert_eq!(c.source, SOURCE);
        assert_eq!(
            c.endpoints(),
            "plaintext 0.0.0.0:2013, pickle 0.0.0.0:2014, admin 127.0.0.1:8080; \
             to 127.0.0.1:2004 (pickle)"
        );
    }

    #[test]
    fn the_built_in_carbon_conf_imports_without_a_warning() {
        let import = from_text(CARBON_CONF, &CarbonOptions::new(SOURCE)).expect("imports");
        assert_eq!(import.warnings, Vec::<String>::new());
    }
}
