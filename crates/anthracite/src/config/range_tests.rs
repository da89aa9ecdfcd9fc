//! Every numeric key has a range checked in the validated config, so no value can
//! panic a conversion (`Duration::from_secs_f64`) or an allocation at startup, and what `run`
//! would trip over before binding (a spill dir that is a file, overlapping listeners, port
//! 0, an empty instance) is an error naming the key.

use super::*;

const BASE: &str = "[destinations]\nservers = [\"127.0.0.1:2104:a\"]\n";

fn err(extra: &str) -> String {
    match Config::from_toml_str(&format!("{BASE}{extra}")) {
        Ok(_) => panic!("accepted: {extra}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn huge_nan_and_negative_durations_are_config_errors_not_panics() {
    for (table, key) in [
        ("listen", "idle_timeout_secs"),
        ("shutdown", "grace_secs"),
        ("telemetry", "interval_secs"),
        ("ingest", "list_reload_secs"),
        ("destinations.spill", "max_age_secs"),
    ] {
        let spill = if table == "destinations.spill" {
            "dir = \"/tmp/anthracite-range-test\"\n"
        } else {
            ""
        };
        for value in ["1e20", "nan", "inf", "-5"] {
            let e = err(&format!("[{table}]\n{spill}{key} = {value}\n"));
            assert!(
                e.contains(&format!("{table}.{key}")),
                "{key} = {value}: {e}"
            );
        }
    }
}

#[test]
fn integers_past_their_range_are_config_errors() {
    for (table, key, value) in [
        ("listen", "max_connections", "18446744073709551615"),
        ("listen", "max_connections", "0"),
        ("listen", "max_name_length", "0"),
        ("listen", "backlog", "0"),
        ("listen", "udp_recv_buffer", "100"),
        ("listen", "max_frame_buffer_bytes", "1000"),
        ("destinations", "linger_ms", "18446744073709551615"),
        ("destinations", "flush_bytes", "0"),
        ("destinations", "connect_timeout_ms", "0"),
        ("destinations", "backoff_max_ms", "18446744073709551615"),
        (
            "destinations.queue",
            "max_datapoints",
            "18446744073709551615",
        ),
        ("destinations.queue", "max_bytes", "10"),
        ("destinations.queue", "full_wait_ms", "3600001"),
        ("router", "replication_factor", "1000000"),
        ("ingest", "min_timestamp_resolution", "18446744073709551615"),
    ] {
        // Keys of [destinations] itself go under the table header that holds `servers`.
        let text = if table == "destinations" {
            format!("{key} = {value}\n")
        } else {
            format!("[{table}]\n{key} = {value}\n")
        };
        let e = err(&text);
        assert!(
            e.contains(&format!("{table}.{key}")),
            "{key} = {value}: {e}"
        );
    }
}

#[test]
fn destination_port_zero_and_empty_instance_are_config_errors() {
    for server in ["127.0.0.1:0:a", "127.0.0.1:2104:"] {
        let e = Config::from_toml_str(&format!("[destinations]\nservers = [{server:?}]\n"))
            .expect_err(server)
            .to_string();
        assert!(e.contains("destinations.servers[0]"), "{server}: {e}");
    }
}

#[test]
fn overlapping_tcp_listeners_are_a_config_error() {
    for (line, pickle) in [
        ("127.0.0.1:2003", "127.0.0.1:2003"),
        ("0.0.0.0:2003", "127.0.0.1:2003"),
    ] {
        let e = err(&format!(
            "[listen]\nline_tcp = {line:?}\npickle_tcp = {pickle:?}\n"
        ));
        assert!(e.contains("listen.pickle_tcp"), "{e}");
    }
    // Different ports, ephemeral ports, and UDP on the TCP port (carbon's default) are fine.
    for (line, pickle, udp) in [
        ("127.0.0.1:2003", "127.0.0.1:2004", "127.0.0.1:2003"),
        ("127.0.0.1:0", "127.0.0.1:0", ""),
    ] {
        Config::from_toml_str(&format!(
            "{BASE}[listen]\nline_tcp = {line:?}\npickle_tcp = {pickle:?}\nline_udp = {udp:?}\n"
        ))
        .expect("distinct listeners");
    }
}

#[test]
fn unusable_spill_dir_is_a_config_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write file");
    for spill in [file.clone(), file.join("below-a-file")] {
        let e = err(&format!(
            "[destinations.spill]\ndir = {:?}\n",
            spill.display().to_string()
        ));
        assert!(e.contains("destinations.spill.dir"), "{e}");
    }
    // The destination's own directory below it is a file.
    std::fs::write(dir.path().join("127.0.0.1_2104_a"), b"x").expect("write file");
    let e = err(&format!(
        "[destinations.spill]\ndir = {:?}\n",
        dir.path().display().to_string()
    ));
    assert!(e.contains("destinations.spill.dir"), "{e}");
    // A directory that does not exist yet but can be created is fine.
    Config::from_toml_str(&format!(
        "{BASE}[destinations.spill]\ndir = {:?}\n",
        dir.path().join("new/spill").display().to_string()
    ))
    .expect("creatable spill dir");
}

#[test]
fn compression_words_and_where_they_apply() {
    let e = err("[listen]\nline_tcp_compression = \"brotli\"\n");
    assert!(e.contains("listen.line_tcp_compression"), "{e}");
    let e = err("[listen]\nmax_decompressed_bytes = 1024\n");
    assert!(e.contains("listen.max_decompressed_bytes"), "{e}");
    // The receivers decompress plaintext: a pickle stream is not compressed.
    let e = Config::from_toml_str(
        "[destinations]\ncompression = \"gzip\"\nservers = [\"127.0.0.1:2104:a\"]\n",
    )
    .expect_err("compressed pickle")
    .to_string();
    assert!(e.contains("destinations.compression"), "{e}");
    let c = Config::from_toml_str(
        "[destinations]\nprotocol = \"line\"\ncompression = \"zstd\"\nservers = [\"127.0.0.1:2104:a\", \
         { address = \"127.0.0.1:2204:b\", compression = \"lz4\" }]\n",
    )
    .expect("valid");
    let kinds: Vec<_> = c.destinations.iter().map(|d| d.compression).collect();
    assert_eq!(kinds, [Compression::Zstd, Compression::Lz4]);
}
