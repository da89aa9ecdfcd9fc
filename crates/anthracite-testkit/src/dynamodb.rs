//! DynamoDB Local 3.1.0 from Maven Central (`servers/dynamodb-local/pom.xml`): resolved once per
//! checkout into `target/tmp/dynamodb-local/` (the server, its libraries and sqlite4java's
//! native ones) by [`java_server`], with a small launcher that binds it to 127.0.0.1. One server
//! per test binary, in memory, on a free port; tables are per test. It exits with the test
//! binary (the launcher watches its parent); a [`DynamoDbLocal`] dropped earlier is stopped by
//! PID.

use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::java_server::{self, JavaServer};
use crate::process::ManagedChild;

const DYNAMODB_LOCAL: JavaServer = JavaServer {
    name: "DynamoDB Local 3.1.0",
    folder: "dynamodb-local",
    launcher: "LoopbackDynamoDbLocal",
    needed_by: "the lease tests",
    jars: &["DynamoDBLocal-3.1.0.jar", "libsqlite4java-linux"],
    jars_described: "DynamoDBLocal-3.1.0.jar and sqlite4java's native library",
};
const READY_LINE: &str = "anthracite-dynamodb-local listening";

/// A running DynamoDB Local.
pub struct DynamoDbLocal {
    child: Mutex<ManagedChild>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
}

impl DynamoDbLocal {
    /// Installs (once per checkout) and starts a server; ready when it says it listens.
    pub fn start() -> DynamoDbLocal {
        let base = DYNAMODB_LOCAL.install();
        let port = crate::free_ports(1)[0];
        let mut cmd = Command::new("java");
        cmd.arg(format!(
            "-Dsqlite4java.library.path={}",
            DYNAMODB_LOCAL.lib().display()
        ))
        .arg("-Xmx256m")
        .arg("-cp")
        .arg(DYNAMODB_LOCAL.classpath())
        .arg(DYNAMODB_LOCAL.launcher)
        .args(["-port", &port.to_string(), "-inMemory", "-sharedDb"])
        .arg("-disableTelemetry");
        let log = base.join(format!("server-{port}.log"));
        let child = java_server::start_until_ready(
            "DynamoDB Local",
            "dynamodb-local",
            cmd,
            log,
            READY_LINE,
            Duration::from_secs(120),
        );
        DynamoDbLocal {
            child: Mutex::new(child),
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The server this test binary shares (started on first use).
    pub fn shared() -> &'static DynamoDbLocal {
        static SERVER: OnceLock<Result<DynamoDbLocal, String>> = OnceLock::new();
        java_server::shared(&SERVER, "DynamoDB Local", DynamoDbLocal::start)
    }

    /// A client for it (dummy credentials).
    pub fn client(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&super::kinesalite::sdk_config(&self.endpoint))
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.lock().map(|c| c.pid()).unwrap_or(0)
    }
}
