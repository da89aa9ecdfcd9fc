//! The extension seam from outside the crate, as a stream crate uses it: a section of sources
//! and a destination protocol of a made-up kind ("memory"), validated, run and reloaded by a
//! relay, on the public API alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anthracite::destination::{
    BoxFuture, DestinationSettings, Outbox, Served, StreamDestination, Transport, encode_line,
};
use anthracite::extension::{
    DestinationContext, Extension, Extensions, Section, SectionContext, SourceContext, SourceError,
    SourceSpec, StreamSource,
};
use anthracite::figure::{Component, Figure, Reporting};
use anthracite::{Config, ConfigError, Relay, ReloadError};
use serde::{Deserialize, Serialize};

/// What the destinations of the extension received, as plaintext lines.
type Received = Arc<Mutex<Vec<String>>>;

#[derive(Debug, Default)]
struct Memory {
    received: Received,
}

/// One `[[memory]]` entry: lines the source feeds once.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
struct RawMemory {
    lines: Vec<String>,
    /// Resolved by the extension when absent.
    label: String,
}

impl Extension for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn sources(
        &self,
        section: &toml::Value,
        cx: &SectionContext<'_>,
    ) -> Result<Section, ConfigError> {
        let mut raw: Vec<RawMemory> = cx.entries(self.name(), section)?;
        for (i, r) in raw.iter_mut().enumerate() {
            if r.lines.is_empty() {
                return Err(cx.invalid(&format!("memory[{i}].lines"), "at least one line"));
            }
            if r.label.is_empty() {
                r.label = format!("source-{i}");
            }
        }
        Ok(Section {
            resolved: toml::Value::try_from(&raw)
                .map_err(|e| cx.invalid("memory", e.to_string()))?,
            sources: raw
                .into_iter()
                .map(|r| Arc::new(r) as Arc<dyn SourceSpec>)
                .collect(),
        })
    }

    fn destination(
        &self,
        settings: &toml::Table,
        cx: &DestinationContext<'_>,
    ) -> Result<(Arc<dyn StreamDestination>, toml::Table), ConfigError> {
        if let Some(k) = settings.keys().find(|k| *k != "prefix") {
            return Err(cx.invalid(k, "unknown key"));
        }
        let mut resolved = settings.clone();
        resolved
            .entry("prefix")
            .or_insert_with(|| toml::Value::String(String::new()));
        Ok((
            Arc::new(MemoryDestination {
                received: self.received.clone(),
            }),
            resolved,
        ))
    }
}

impl SourceSpec for RawMemory {
    fn prepare(&self) -> BoxFuture<'_, Result<Box<dyn StreamSource>, SourceError>> {
        let lines = self.lines.clone();
        Box::pin(async move { Ok(Box::new(MemorySource { lines }) as Box<dyn StreamSource>) })
    }
}

#[derive(Debug)]
struct MemorySource {
    lines: Vec<String>,
}

#[derive(Debug)]
struct Fed;

impl Reporting for Fed {
    fn component(&self) -> Component {
        Component {
            path: "memory".into(),
            figures: vec![
                Figure::counter(1)
                    .series("anthracite_memory_sources_total", Vec::new())
                    .described("Memory sources run."),
            ],
        }
    }
}

impl StreamSource for MemorySource {
    fn describe(&self) -> String {
        format!("memory source of {} lines", self.lines.len())
    }

    fn reporting(&self) -> Arc<dyn Reporting> {
        Arc::new(Fed)
    }

    fn run(self: Box<Self>, cx: SourceContext) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut ingestor = cx.ingestor();
            let text = self.lines.join("\n");
            let seen = ingestor.message(text.as_bytes(), 1024);
            assert_eq!(seen.lines as usize, self.lines.len());
            ingestor.flush().await;
            cx.stop().cancelled().await;
        })
    }
}

#[derive(Debug)]
struct MemoryDestination {
    received: Received,
}

impl StreamDestination for MemoryDestination {
    fn transport(&self, _settings: &DestinationSettings) -> Box<dyn Transport> {
        Box::new(MemoryTransport {
            received: self.received.clone(),
        })
    }
}

struct MemoryTransport {
    received: Received,
}

impl Transport for MemoryTransport {
    fn connect(&mut self) -> BoxFuture<'_, std::io::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn serve<'a>(&'a mut self, mut outbox: Outbox<'a>) -> BoxFuture<'a, Served> {
        Box::pin(async move {
            loop {
                if let Err(end) = outbox.next_write().await {
                    return end;
                }
                let mut buf = bytes::BytesMut::new();
                let n = outbox.write_len();
                for dp in outbox.datapoints() {
                    encode_line(dp, &mut buf);
                }
                let text = String::from_utf8_lossy(&buf).into_owned();
                self.received
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend(text.lines().map(str::to_owned));
                outbox.delivered(n, 1, 0);
            }
        })
    }
}

const TOML: &str = r#"
[listen]
line_tcp = ""
pickle_tcp = ""
[telemetry]
interval_secs = 0
[destinations]
servers = [{ address = "memory:1:a", protocol = "memory" }]
[[memory]]
lines = ["app.one 1 1700000000", "app.two 2 1700000000", "not a line"]
"#;

#[test]
fn a_section_and_a_protocol_of_another_crate_are_validated_by_it_and_resolved() {
    let memory = Memory::default();
    let extensions = Extensions::new().with(memory).with_feature("extra");
    assert_eq!(extensions.features(), ["memory", "extra"]);
    let config = Config::from_toml_str_with(TOML, &extensions).expect("valid");
    let resolved = config.to_resolved_toml();
    assert!(resolved.contains("label = \"source-0\""), "{resolved}");
    assert!(resolved.contains("prefix = \"\""), "{resolved}");
    // The resolved text reads back the same.
    let again = Config::from_toml_str_with(&resolved, &extensions).expect("resolved is valid");
    assert_eq!(again.to_resolved_toml(), resolved);

    let e = Config::from_toml_str(TOML).expect_err("the core alone");
    assert!(e.to_string().contains("protocol"), "{e}");
    let e = Config::from_toml_str_with(&TOML.replace("lines = [", "lines = [] # "), &extensions)
        .expect_err("the extension's own rule");
    assert!(e.to_string().contains("memory[0].lines"), "{e}");
    let e = Config::from_toml_str_with(&TOML.replace("[[memory]]", "[[memoir]]"), &extensions)
        .expect_err("a section nobody claims");
    assert!(e.to_string().contains("memoir"), "{e}");
    let e = Config::from_toml_str_with(
        &TOML.replace("protocol = \"memory\"", "protocol = \"memory\", suffix = 1"),
        &extensions,
    )
    .expect_err("a key the extension refuses");
    assert!(e.to_string().contains("servers[0].suffix"), "{e}");
    let e = Config::from_toml_str_with(
        &TOML.replace(
            "protocol = \"memory\"",
            "protocol = \"line\", prefix = \"\"",
        ),
        &extensions,
    )
    .expect_err("an extension's key on a core protocol");
    assert!(e.to_string().contains("servers[0].prefix"), "{e}");
}

#[tokio::test]
async fn a_relay_runs_the_sources_and_destinations_of_an_extension() {
    let memory = Memory::default();
    let received = memory.received.clone();
    let extensions = Extensions::new().with(memory);
    let config = Config::from_toml_str_with(TOML, &extensions).expect("valid");
    let relay = Relay::builder(config)
        .features(extensions.features())
        .build()
        .expect("builds");
    let handle = relay.handle();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(relay.run(async {
        let _ = stopped.await;
    }));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received.lock().unwrap_or_else(|p| p.into_inner()).len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the destination never received the source's lines"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A changed section needs a restart; the relay goes on.
    let changed = Config::from_toml_str_with(&TOML.replace("app.two", "app.three"), &extensions)
        .expect("valid");
    match handle.reload(changed).await {
        Err(ReloadError::NeedsRestart { key, .. }) => assert_eq!(key, "memory"),
        other => panic!("expected a restart to be needed: {other:?}"),
    }
    let _ = stop.send(());
    let report = running.await.expect("join").expect("runs");
    let mut lines = received.lock().unwrap_or_else(|p| p.into_inner()).clone();
    lines.sort();
    assert_eq!(lines, ["app.one 1 1700000000", "app.two 2 1700000000"]);
    let s = report.stats;
    assert_eq!(s.destinations[0].sent, 2);
    assert_eq!(s.ingest.invalid.total(), 1, "the bad line is counted");
}
