//! The import against carbon-c-relay's own behaviour, on small configurations.

use super::*;

fn import(text: &str, flags: &[&str]) -> Result<CRelayImport, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relay.conf");
    std::fs::write(&path, text).expect("write");
    let mut options = CRelayOptions::new(&path);
    options.flags = CRelayFlags::parse(flags).expect("flags");
    Config::load_c_relay(&options)
}

#[test]
fn a_configuration_becomes_destinations_and_routing() {
    let i = import(
        "cluster a forward 127.0.0.1:2003 127.0.0.1:2004;\n\
         cluster b carbon_ch 127.0.0.1:2005=x 127.0.0.1:2006=y;\n\
         match ^sys\\. send to a stop;\n\
         match * send to b;\n",
        &["-H", "relay1.example.com"],
    )
    .expect("valid");
    assert_eq!(i.config.destinations.len(), 4);
    assert_eq!(i.config.destinations[0].spec.to_string(), "127.0.0.1:2003");
    assert!(i.config.router.c_relay.is_some());
    let header = i.test_header();
    assert!(
        header.contains("relay hostname = relay1.example.com"),
        "{header}"
    );
    assert!(
        header.contains("prefix with carbon.relays.relay1_example_com"),
        "{header}"
    );
    let out = i.test_line("sys.cpu 1 2").expect("printed");
    assert_eq!(
        out,
        "match\n    ^sys\\. [strncmp: sys.]\n    -> sys.cpu\n    forward(a)\n        127.0.0.1:2003\n        127.0.0.1:2004\n    stop\n"
    );
}

#[test]
fn errors_name_file_line_and_what_carbon_c_relay_says() {
    let e = import(
        "cluster a forward 127.0.0.1:2003;\nmatch * send to b;\n",
        &[],
    )
    .expect_err("unknown cluster")
    .to_string();
    assert!(
        e.contains("relay.conf: line 2, column 17: unknown cluster"),
        "{e}"
    );
    let e = import(
        "cluster a any_of 127.0.0.1:2003;\ncluster b forward 127.0.0.1:2004;\ncluster c any_of 127.0.0.1:2004;\n",
        &[],
    )
    .expect_err("shared any_of server")
    .to_string();
    assert!(
        e.contains("line 3") && e.contains("cannot share server 127.0.0.1:2004"),
        "{e}"
    );
    let e = import(
        "cluster a carbon_ch replication 3 127.0.0.1:1 127.0.0.1:2;\n",
        &[],
    )
    .expect_err("replication")
    .to_string();
    assert!(
        e.contains("replication count (3) is larger than the number of servers (2)"),
        "{e}"
    );
    let e = import("match (unclosed send to blackhole;\n", &[])
        .expect_err("regex")
        .to_string();
    assert!(e.contains("invalid expression '(unclosed'"), "{e}");
    let e = import("include /nonexistent/x.conf;\n", &[])
        .expect_err("missing include")
        .to_string();
    assert!(
        e.contains("unable to stat file '/nonexistent/x.conf'"),
        "{e}"
    );
}

#[test]
fn includes_read_in_place_and_globs_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("b.conf"), "match ^b send to c;\n").expect("write");
    std::fs::write(dir.path().join("a.conf"), "match ^a send to c;\n").expect("write");
    let main = dir.path().join("main.conf");
    std::fs::write(
        &main,
        format!(
            "cluster c forward 127.0.0.1:2003;\ninclude {}/*.conf;\nmatch * send to blackhole;\n",
            dir.path().display()
        ),
    )
    .expect("write");
    // main.conf matches the glob too: it would include itself; keep it out of the glob.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::rename(dir.path().join("a.conf"), sub.join("a.conf")).expect("mv");
    std::fs::rename(dir.path().join("b.conf"), sub.join("b.conf")).expect("mv");
    std::fs::write(
        &main,
        format!(
            "cluster c forward 127.0.0.1:2003;\ninclude {}/*.conf;\nmatch * send to blackhole;\n",
            sub.display()
        ),
    )
    .expect("write");
    let i = Config::load_c_relay(&CRelayOptions::new(&main)).expect("valid");
    let patterns: Vec<_> = i
        .setup
        .program
        .routes
        .iter()
        .map(|r| r.pattern.clone().unwrap_or_else(|| "*".into()))
        .collect();
    assert_eq!(patterns, vec!["^a", "^b", "*"]);
}

#[test]
fn the_default_listeners_are_tcp_udp_and_a_unix_socket_on_the_port() {
    let i = import("match * send to blackhole;\n", &["-p", "2103"]).expect("valid");
    let l = &i.setup.listeners;
    assert_eq!(l.len(), 3);
    assert_eq!(l[2].ip.as_deref(), Some("/tmp/.s.carbon-c-relay.2103"));
    assert_eq!(i.config.listen.line_tcp.map(|a| a.port()), Some(2103));
}

/// The servers a line goes to with `down` servers failing.
fn sends_with_down(program: &Program, line: &str, down: &[u16]) -> Vec<u16> {
    let mut routed = crate::router::c_relay::Routed::default();
    let failed = |s: u16| down.contains(&s);
    let env = crate::router::c_relay::route::Env { failed: &failed };
    let fs = line.find(' ').unwrap_or(line.len());
    program.route(line.as_bytes(), fs, b"", &env, &mut routed);
    routed.sends.iter().map(|&(_, s)| s).collect()
}

#[test]
fn members_that_are_down_are_passed_over_by_any_of_failover_and_dynamic() {
    let mut b = build::Builder::offline("relay.example");
    b.read_text(
        "<text>",
        b"cluster any any_of 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3;\n\
          cluster fo failover 127.0.0.1:4 127.0.0.1:5;\n\
          cluster ch carbon_ch replication 2 dynamic 127.0.0.1:6=a 127.0.0.1:7=b 127.0.0.1:8=c;\n\
          match * send to any fo ch;\n",
    )
    .expect("valid");
    let (program, _) = b.finish(None);
    for i in 0..50 {
        let line = format!("m.{i} 1 2");
        let up = sends_with_down(&program, &line, &[]);
        // any_of, failover (its first), carbon_ch (two replicas).
        assert_eq!(up.len(), 4, "{line}: {up:?}");
        assert_eq!(up[1], 3, "failover takes its first member");
        let down = [up[0], 3, up[2]];
        let moved = sends_with_down(&program, &line, &down);
        assert!(
            !down.contains(&moved[0]) && moved[0] < 3,
            "{line}: {moved:?}"
        );
        assert_eq!(moved[1], 4, "failover takes the next member");
        assert!(
            moved[2..].iter().all(|s| !down.contains(s)),
            "{line}: {moved:?}"
        );
        // Every member down: carbon-c-relay's own choice.
        assert_eq!(
            sends_with_down(&program, &line, &[0, 1, 2, 3, 4])[..2],
            up[..2]
        );
    }
}

#[test]
fn the_overlay_and_the_spill_directory_apply_to_every_member_files_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("relay.conf");
    std::fs::write(
        &conf,
        "cluster a any_of 127.0.0.1:2003 127.0.0.1:2004;\ncluster f file /tmp/out;\n\
         match * send to a f;\n",
    )
    .expect("write");
    let overlay = dir.path().join("overlay.toml");
    std::fs::write(
        &overlay,
        "[spill]\ndir = \"spool\"\nmax_bytes = 268435456\n\
         [admin]\nlisten = \"127.0.0.1:8080\"\n[limits]\nmax_aggregation_series = 5\n",
    )
    .expect("write");
    let mut options = CRelayOptions::new(&conf);
    options.overlay = Some(overlay.clone());
    let i = Config::load_c_relay(&options).expect("valid");
    assert_eq!(i.config.admin_listen, Some(([127, 0, 0, 1], 8080).into()));
    let d = &i.config.destinations;
    assert_eq!(d[0].queue.when_full, WhenFull::Spill);
    let spill = d[0].spill.as_ref().expect("a spill log");
    assert!(spill.dir.starts_with(dir.path().join("spool")), "{spill:?}");
    assert_eq!(spill.log.max_bytes, 268_435_456);
    // The file member is a destination like the others, appending to its file.
    assert_eq!(d[2].queue.when_full, WhenFull::Spill);
    assert_eq!(d[2].file.as_deref(), Some(std::path::Path::new("/tmp/out")));
    assert_eq!(d[0].file, None);

    // The command line's directory wins.
    options.spill_dir = Some(dir.path().join("elsewhere"));
    let i = Config::load_c_relay(&options).expect("valid");
    let spill = i.config.destinations[0]
        .spill
        .as_ref()
        .expect("a spill log");
    assert!(
        spill.dir.starts_with(dir.path().join("elsewhere")),
        "{spill:?}"
    );

    // Without either, carbon-c-relay's queue: -q datapoints, then drops.
    let i = import(
        "cluster a forward 127.0.0.1:2003;\nmatch * send to a;\n",
        &["-q", "5000"],
    )
    .expect("valid");
    let d = &i.config.destinations[0];
    assert_eq!(
        (d.queue.max_datapoints, d.queue.when_full),
        (5000, WhenFull::DropNewest)
    );
    assert!(d.spill.is_none());

    // Unknown keys and a zero bound name the overlay.
    for text in [
        "[spill]\nbogus = 1\n",
        "[limits]\nmax_aggregation_series = 0\n",
        "[limits]\nmax_aggregation_values = 0\n",
    ] {
        std::fs::write(&overlay, text).expect("write");
        options.spill_dir = None;
        let e = Config::load_c_relay(&options)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("overlay.toml"), "{e}");
    }
}

#[test]
fn transports_reach_the_listeners_and_the_members() {
    let i = import(
        "listen type linemode transport lz4 127.0.0.1:12003 proto tcp ;\n\
         listen type linemode transport zstd 127.0.0.1:12004 proto tcp ;\n\
         cluster a forward 127.0.0.1:2003 transport gzip 127.0.0.1:2004 transport zstd \
         127.0.0.1:2005 ;\n\
         match * send to a ;\n",
        &[],
    )
    .expect("valid");
    let l = &i.config.listen;
    assert_eq!(l.line_tcp_compression, Compression::Lz4);
    assert_eq!(
        l.extra_line,
        vec![ExtraLine::Tcp(
            "127.0.0.1:12004".parse().expect("an address"),
            Compression::Zstd,
            None
        )]
    );
    let kinds: Vec<Compression> = i
        .config
        .destinations
        .iter()
        .map(|d| d.compression)
        .collect();
    assert_eq!(
        kinds,
        [Compression::Gzip, Compression::Zstd, Compression::Plain]
    );
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    // Printed back as carbon-c-relay prints its own transports.
    assert!(
        i.test_header()
            .contains("    type linemode transport zstd\n        127.0.0.1:12004 proto tcp"),
        "{}",
        i.test_header()
    );
}

/// A certificate for `names` signed by a new CA: (CA PEM, certificate PEM, key PEM).
fn signed(names: &[&str]) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
            .expect("params");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

#[test]
fn ssl_members_connect_inside_tls_checked_against_the_ca_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, signed(&["localhost"]).0).expect("write CA");
    let ca_arg = ca.display().to_string();
    let i = import(
        "cluster a forward 127.0.0.1:2003 transport gzip ssl 127.0.0.1:2004 ;
         match * send to a ;
",
        &["-C", &ca_arg],
    )
    .expect("valid");
    let d = &i.config.destinations;
    assert_eq!(d[0].compression, Compression::Gzip);
    let tls = d[0].tls.as_ref().expect("the ssl member is inside TLS");
    assert_eq!(tls.settings().ca_file.as_deref(), Some(ca.as_path()));
    assert_eq!(tls.settings().names, NameCheck::ChainOnly);
    assert!(d[1].tls.is_none(), "the other member stays plaintext");
    assert!(i.warnings.is_empty(), "{:?}", i.warnings);
    // A directory of CA files, as `-C` takes one too.
    let dir_arg = dir.path().display().to_string();
    let i = import(
        "cluster a forward 127.0.0.1:2003 transport plain ssl ;
match * send to a ;
",
        &["-C", &dir_arg],
    )
    .expect("a directory of CA files");
    assert!(i.config.destinations[0].tls.is_some());
}

#[test]
fn an_ssl_member_over_udp_is_warned_about() {
    let i = import(
        "cluster a forward 127.0.0.1:2003 proto udp transport plain ssl ;\nmatch * send to a ;\n",
        &[],
    )
    .expect("valid, as carbon-c-relay -t -t accepts it");
    assert!(i.config.destinations[0].tls.is_none());
    assert!(
        i.warnings
            .iter()
            .any(|w| w.starts_with("127.0.0.1:2003: proto udp with ssl")),
        "{:?}",
        i.warnings
    );
}

#[test]
fn ssl_members_without_the_ca_flag_say_whom_they_trust() {
    let i = import(
        "cluster a forward 127.0.0.1:2003 transport plain ssl ;
match * send to a ;
",
        &[],
    )
    .expect("valid, as carbon-c-relay -t -t accepts it");
    assert!(i.config.destinations[0].tls.is_some());
    assert!(
        i.warnings.iter().any(|w| w.contains("without -C")),
        "{:?}",
        i.warnings
    );
}

#[test]
fn ca_flag_naming_nothing_is_refused_as_carbon_c_relay_refuses_it() {
    let e = import(
        "cluster a forward 127.0.0.1:2003 ;
match * send to a ;
",
        &["-C", "/nonexistent/ca.pem"],
    )
    .expect_err("refused, in -t too")
    .to_string();
    assert!(
        e.contains("failed to open TLS/SSL CA file '/nonexistent/ca.pem'"),
        "{e}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").expect("write");
    let arg = empty.display().to_string();
    let e = import(
        "cluster a forward 127.0.0.1:2003 transport plain ssl ;
match * send to a ;
",
        &["-C", &arg],
    )
    .expect_err("a CA file without a certificate")
    .to_string();
    assert!(
        e.contains("empty.pem") && e.contains("no PEM certificate"),
        "{e}"
    );
}

#[test]
fn ssl_listener_pem_is_read_at_start_and_its_errors_name_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, cert, key) = signed(&["localhost"]);
    let good = dir.path().join("good.pem");
    std::fs::write(&good, format!("{cert}{key}")).expect("write");
    let cert_only = dir.path().join("cert-only.pem");
    std::fs::write(&cert_only, &cert).expect("write");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let text = format!(
        "listen type linemode 127.0.0.1:12001 proto tcp ;\n\
         listen type linemode transport gzip ssl {} 127.0.0.1:12002 proto tcp ;\n\
         listen type linemode transport plain ssl {}\n  127.0.0.1:12003 proto tcp ;\n\
         listen type linemode transport plain ssl {} 127.0.0.1:12004 proto tcp ;\n\
         listen type linemode transport plain ssl missing.pem 127.0.0.1:12005 proto tcp ;\n\
         cluster a forward 127.0.0.1:2003 ;\nmatch * send to a ;\n",
        good.display(),
        cert_only.display(),
        garbage.display()
    );
    // `check` accepts it, as `carbon-c-relay -t -t` does; each file it cannot use is a warning.
    let i = import(&text, &[]).expect("accepted, the files read only at start");
    let l = &i.config.listen;
    assert_eq!(l.line_tcp, Some("127.0.0.1:12001".parse().expect("addr")));
    let pems: Vec<(Compression, &ListenerPem)> = l
        .extra_line
        .iter()
        .filter_map(|e| match e {
            ExtraLine::Tcp(_, c, Some(p)) => Some((*c, p)),
            _ => None,
        })
        .collect();
    assert_eq!(pems.len(), 4, "{:?}", l.extra_line);
    assert_eq!(pems[0].0, Compression::Gzip);
    assert!(pems[0].1.load().is_ok(), "certificate and key in one file");
    for ((_, pem), (line, why)) in pems[1..].iter().zip([
        (3, "no PEM private key"),
        (5, "no PEM certificate"),
        (6, "cannot read missing.pem"),
    ]) {
        let e = pem.load().expect_err("refused at start");
        assert!(
            e.contains(&format!("relay.conf:{line}:")) && e.contains(why),
            "{e}"
        );
        assert!(
            i.warnings
                .iter()
                .any(|w| w == &format!("{e}; `run` refuses to start without it")),
            "{:?}",
            i.warnings
        );
    }
}
