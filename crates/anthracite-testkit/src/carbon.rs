//! Real carbon 1.1.10 processes: carbon-cache instances and a carbon-relay, each in its own
//! generated GRAPHITE_ROOT (a tempdir) on free loopback ports, stopped by PID on drop.

use std::fmt::Write as _;
use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::free_ports;
use super::process::ManagedChild;
use super::venv::carbon_venv;

/// How long a carbon process gets to open its ports (Twisted start-up on a loaded 2-core box).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `storage-schemas.conf`: one-second resolution for a day, so distinct timestamps within the
/// last day stay distinct datapoints.
pub const STORAGE_SCHEMAS: &str = "[default]\npattern = .*\nretentions = 1s:1d\n";

/// One running carbon-cache instance.
pub struct CacheInstance {
    /// Instance name (`a`, `b`, …).
    pub name: String,
    /// Plaintext receiver port on 127.0.0.1.
    pub line_port: u16,
    /// Pickle receiver port on 127.0.0.1.
    pub pickle_port: u16,
    /// Protobuf receiver port on 127.0.0.1 (carbon's `protobuf` receiver plugin).
    pub protobuf_port: u16,
    /// Cache query port on 127.0.0.1.
    pub query_port: u16,
    /// LOCAL_DATA_DIR: whisper files land here.
    pub data_dir: PathBuf,
    process: ManagedChild,
}

impl CacheInstance {
    /// `127.0.0.1:<pickle_port>:<name>`, a DESTINATIONS entry for this cache.
    pub fn pickle_destination(&self) -> String {
        format!("127.0.0.1:{}:{}", self.pickle_port, self.name)
    }

    /// `127.0.0.1:<protobuf_port>:<name>`, a DESTINATIONS entry for this cache's protobuf
    /// receiver.
    pub fn protobuf_destination(&self) -> String {
        format!("127.0.0.1:{}:{}", self.protobuf_port, self.name)
    }

    /// `127.0.0.1:<line_port>`.
    pub fn line_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.line_port))
    }

    /// `127.0.0.1:<pickle_port>`.
    pub fn pickle_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.pickle_port))
    }

    /// The last `n` lines of this cache's log (stdout and stderr of `carbon-cache.py --debug`).
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// Panics with the log tail if the cache process has died.
    pub fn assert_running(&mut self, waiting_for: &str) {
        self.process.assert_running(waiting_for);
    }

    /// The PID of the carbon-cache process.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// N real carbon-cache instances sharing one generated GRAPHITE_ROOT and carbon.conf.
/// Dropping it stops every instance, then deletes the root.
pub struct CarbonCaches {
    /// The instances, in the order their names were given.
    pub instances: Vec<CacheInstance>,
    /// GRAPHITE_ROOT (conf/, storage/).
    pub root: PathBuf,
    // Declared last: dropped after the instances (fields drop in declaration order).
    _dir: tempfile::TempDir,
}

impl CarbonCaches {
    /// Starts one carbon-cache per name (`&["a", "b"]`) and waits until each accepts
    /// connections on its line and pickle ports.
    pub fn start(names: &[&str]) -> CarbonCaches {
        let venv = carbon_venv();
        let dir = tempfile::Builder::new()
            .prefix("carbon-caches-")
            .tempdir()
            .expect("create tempdir for GRAPHITE_ROOT");
        let root = dir.path().to_path_buf();
        let conf_dir = root.join("conf");
        let storage = root.join("storage");
        fs::create_dir_all(&conf_dir).expect("create conf dir");
        fs::create_dir_all(storage.join("log")).expect("create storage/log dir");

        let ports = free_ports(4 * names.len());
        let mut conf = String::from(
            "[cache]\n\
             LINE_RECEIVER_INTERFACE = 127.0.0.1\n\
             PICKLE_RECEIVER_INTERFACE = 127.0.0.1\n\
             PROTOBUF_RECEIVER_INTERFACE = 127.0.0.1\n\
             CACHE_QUERY_INTERFACE = 127.0.0.1\n\
             MAX_CACHE_SIZE = inf\n\
             MAX_CREATES_PER_MINUTE = inf\n\
             MAX_UPDATES_PER_SECOND = inf\n\
             CARBON_METRIC_INTERVAL = 0\n\
             # no graphite-web tag database here\n\
             ENABLE_TAGS = False\n\
             # 1s:1d files are 1 MB each when preallocated; sparse keeps thousands of them cheap\n\
             WHISPER_SPARSE_CREATE = True\n\
             WHISPER_FALLOCATE_CREATE = False\n\
             LOG_LISTENER_CONN_SUCCESS = False\n\
             LOG_CACHE_HITS = False\n\
             LOG_UPDATES = False\n\
             LOG_CREATES = False\n",
        );
        let mut planned = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let (line, pickle, query, protobuf) = (
                ports[4 * i],
                ports[4 * i + 1],
                ports[4 * i + 2],
                ports[4 * i + 3],
            );
            let data_dir = storage.join(format!("whisper-{name}"));
            fs::create_dir_all(&data_dir).expect("create LOCAL_DATA_DIR");
            write!(
                conf,
                "\n[cache:{name}]\nLINE_RECEIVER_PORT = {line}\nPICKLE_RECEIVER_PORT = {pickle}\n\
                 PROTOBUF_RECEIVER_PORT = {protobuf}\nCACHE_QUERY_PORT = {query}\nLOCAL_DATA_DIR = {}\n",
                data_dir.display()
            )
            .unwrap();
            planned.push((name.to_string(), line, pickle, protobuf, query, data_dir));
        }
        let conf_path = conf_dir.join("carbon.conf");
        fs::write(&conf_path, conf).expect("write carbon.conf");
        fs::write(conf_dir.join("storage-schemas.conf"), STORAGE_SCHEMAS)
            .expect("write storage-schemas.conf");

        let mut instances = Vec::new();
        for (name, line_port, pickle_port, protobuf_port, query_port, data_dir) in planned {
            let cmd = carbon_command(&venv, "carbon-cache.py", &name, &conf_path, &root);
            let log = storage
                .join("log")
                .join(format!("carbon-cache-{name}.console.log"));
            let process = ManagedChild::spawn(&format!("carbon-cache {name}"), cmd, log);
            instances.push(CacheInstance {
                name,
                line_port,
                pickle_port,
                protobuf_port,
                query_port,
                data_dir,
                process,
            });
        }
        // Start all first, then wait: the instances boot in parallel.
        for inst in &mut instances {
            let ports = [inst.line_port, inst.pickle_port, inst.protobuf_port];
            wait_for_ports(&mut inst.process, &ports);
        }
        CarbonCaches {
            instances,
            root,
            _dir: dir,
        }
    }

    /// The instance called `name`.
    pub fn get(&self, name: &str) -> &CacheInstance {
        self.instances
            .iter()
            .find(|i| i.name == name)
            .unwrap_or_else(|| panic!("no carbon-cache instance {name}"))
    }

    /// `127.0.0.1:<pickle port>:<name>, …` in start order: a DESTINATIONS value.
    pub fn pickle_destinations(&self) -> String {
        self.instances
            .iter()
            .map(CacheInstance::pickle_destination)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Every instance's log tail, for failure messages.
    pub fn log_tails(&self, n: usize) -> String {
        let mut s = String::new();
        for inst in &self.instances {
            writeln!(
                s,
                "--- carbon-cache {} log (tail) ---\n{}",
                inst.name,
                inst.log_tail(n)
            )
            .unwrap();
        }
        s
    }
}

fn carbon_command(venv: &Path, script: &str, instance: &str, conf: &Path, root: &Path) -> Command {
    let mut cmd = Command::new(venv.join("bin").join("python"));
    cmd.arg(venv.join("bin").join(script))
        .arg(format!("--instance={instance}"))
        .arg("--debug")
        .arg(format!("--config={}", conf.display()))
        .arg("start")
        .env("GRAPHITE_ROOT", root)
        .env("PYTHONUNBUFFERED", "1")
        .current_dir(root);
    cmd
}

/// Waits until `ports` on 127.0.0.1 accept connections, panicking (with the log tail) if the
/// process exits or the deadline passes.
fn wait_for_ports(process: &mut ManagedChild, ports: &[u16]) {
    let deadline = Instant::now() + READY_TIMEOUT;
    for &port in ports {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        loop {
            process.assert_running(&format!("port {port} to accept connections"));
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} (pid {}) did not accept connections on {addr} within {READY_TIMEOUT:?}\n--- {} (tail) ---\n{}",
                    process.label,
                    process.pid(),
                    process.log.display(),
                    process.log_tail(40)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A carbon.conf for carbon-relay written by [`write_carbon_conf`].
pub struct CarbonConf {
    /// GRAPHITE_ROOT (holds `conf/` and `storage/`).
    pub root: PathBuf,
    /// `<root>/conf/carbon.conf`.
    pub path: PathBuf,
    /// LINE_RECEIVER_PORT written into `[relay]` (a free port when written).
    pub line_port: u16,
    /// PICKLE_RECEIVER_PORT written into `[relay]` (a free port when written).
    pub pickle_port: u16,
}

/// Writes `<dir>/conf/carbon.conf` (+ `storage-schemas.conf`, `storage/`) for a relay:
/// a `[relay]` section binding 127.0.0.1 on two free ports (line, pickle) with UDP off,
/// followed verbatim by `relay_section` (more `[relay]` keys such as DESTINATIONS, RELAY_METHOD,
/// MAX_QUEUE_SIZE — it must not repeat the interface/port keys — and optionally further sections).
/// `extra_files` are written into `conf/` too, e.g. `("relay-rules.conf", "...")`.
pub fn write_carbon_conf(
    dir: &Path,
    relay_section: &str,
    extra_files: &[(&str, &str)],
) -> CarbonConf {
    let conf_dir = dir.join("conf");
    fs::create_dir_all(&conf_dir).expect("create conf dir");
    fs::create_dir_all(dir.join("storage").join("log")).expect("create storage/log dir");
    let ports = free_ports(2);
    let text = format!(
        "[relay]\n\
         LINE_RECEIVER_INTERFACE = 127.0.0.1\n\
         LINE_RECEIVER_PORT = {}\n\
         PICKLE_RECEIVER_INTERFACE = 127.0.0.1\n\
         PICKLE_RECEIVER_PORT = {}\n\
         ENABLE_UDP_LISTENER = False\n\
         {}\n",
        ports[0], ports[1], relay_section
    );
    let path = conf_dir.join("carbon.conf");
    fs::write(&path, text).expect("write carbon.conf");
    fs::write(conf_dir.join("storage-schemas.conf"), STORAGE_SCHEMAS)
        .expect("write storage-schemas.conf");
    for (name, body) in extra_files {
        fs::write(conf_dir.join(name), body).unwrap_or_else(|e| panic!("write conf/{name}: {e}"));
    }
    CarbonConf {
        root: dir.to_path_buf(),
        path,
        line_port: ports[0],
        pickle_port: ports[1],
    }
}

/// The real `carbon-relay.py` 1.1.10, instance `a`, stopped by PID on drop.
pub struct CarbonRelay {
    /// Plaintext port on 127.0.0.1.
    pub line_port: u16,
    /// Pickle port on 127.0.0.1.
    pub pickle_port: u16,
    process: ManagedChild,
}

impl CarbonRelay {
    /// Starts `carbon-relay.py --instance=a --debug --config=<conf.path> start` with
    /// GRAPHITE_ROOT = `conf.root` and waits until its line and pickle ports accept connections.
    pub fn start(conf: &CarbonConf) -> CarbonRelay {
        let venv = carbon_venv();
        let cmd = carbon_command(&venv, "carbon-relay.py", "a", &conf.path, &conf.root);
        let log = conf
            .root
            .join("storage")
            .join("log")
            .join("carbon-relay-a.console.log");
        let mut process = ManagedChild::spawn("carbon-relay a", cmd, log);
        wait_for_ports(&mut process, &[conf.line_port, conf.pickle_port]);
        CarbonRelay {
            line_port: conf.line_port,
            pickle_port: conf.pickle_port,
            process,
        }
    }

    /// Starts carbon-relay on a carbon.conf it is expected to refuse, waits (at most
    /// 60 s) for it to exit unsuccessfully, and returns its log. Panics if it keeps
    /// running or exits with success.
    pub fn expect_refusal(conf: &CarbonConf) -> String {
        let venv = carbon_venv();
        let cmd = carbon_command(&venv, "carbon-relay.py", "a", &conf.path, &conf.root);
        let log = conf
            .root
            .join("storage")
            .join("log")
            .join("carbon-relay-a.refusal.log");
        let mut process = ManagedChild::spawn("carbon-relay a (expected to refuse)", cmd, log);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = process.exited() {
                assert!(
                    !status.success(),
                    "carbon-relay exited successfully on a carbon.conf it should refuse:\n{}",
                    process.log_tail(40)
                );
                return process.log_tail(200);
            }
            assert!(
                Instant::now() < deadline,
                "carbon-relay still running after {READY_TIMEOUT:?} on a carbon.conf it should refuse:\n{}",
                process.log_tail(40)
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last `n` lines of the relay's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// Panics with the log tail if the relay has died.
    pub fn assert_running(&mut self, waiting_for: &str) {
        self.process.assert_running(waiting_for);
    }

    /// Stops the relay now (SIGTERM, bounded wait, SIGKILL), e.g. to let it flush its queues.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// The PID of the carbon-relay process.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

/// The real `carbon-aggregator.py` 1.1.10, instance `a`, on a carbon.conf with an
/// `[aggregator]` section (its aggregation-rules.conf and rewrite-rules.conf beside it), stopped
/// by PID on drop.
pub struct CarbonAggregator {
    process: ManagedChild,
}

impl CarbonAggregator {
    /// Starts `carbon-aggregator.py --instance=a --debug --config=<conf> start` with
    /// GRAPHITE_ROOT = `root` and waits until `ports` accept connections.
    pub fn start(root: &Path, conf: &Path, ports: &[u16]) -> CarbonAggregator {
        let venv = carbon_venv();
        let cmd = carbon_command(&venv, "carbon-aggregator.py", "a", conf, root);
        let log = root
            .join("storage")
            .join("log")
            .join("carbon-aggregator-a.console.log");
        let mut process = ManagedChild::spawn("carbon-aggregator a", cmd, log);
        wait_for_ports(&mut process, ports);
        CarbonAggregator { process }
    }

    /// The last `n` lines of the aggregator's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }

    /// Panics with the log tail if the aggregator has died.
    pub fn assert_running(&mut self, waiting_for: &str) {
        self.process.assert_running(waiting_for);
    }
}
