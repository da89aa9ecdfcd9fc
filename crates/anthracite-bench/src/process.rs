//! Relay processes the harness starts: spawned without a shell when possible, in their own
//! process group, and always stopped by PID (SIGTERM to the group, then SIGKILL) — on
//! [`RelayProcess::stop`] or, as a last resort, on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::BenchError;

/// Grace period between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// Splits a command line like a simple POSIX shell (quotes and backslashes), or returns `None`
/// when it uses shell syntax (pipes, redirections, variables…) and needs `sh -c`.
pub fn split_command(cmd: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => cur.push(chars.next()?),
                        Some('$') | Some('`') => return None,
                        Some(x) => cur.push(x),
                        None => return None,
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            '|' | '&' | ';' | '<' | '>' | '$' | '`' | '(' | ')' | '*' | '?' | '~' => return None,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    (!words.is_empty()).then_some(words)
}

/// A started relay process.
#[derive(Debug)]
pub struct RelayProcess {
    child: Option<Child>,
    /// Its pid (also its process group id).
    pub pid: u32,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl RelayProcess {
    /// Starts `cmd` (already rendered) in a new process group, output to `log`.
    pub fn spawn(cmd: &str, log: PathBuf) -> Result<RelayProcess, BenchError> {
        use std::os::unix::process::CommandExt;
        let argv = split_command(cmd).unwrap_or_else(|| vec!["sh".into(), "-c".into(), cmd.into()]);
        let out = std::fs::File::create(&log).map_err(|source| BenchError::Io {
            context: format!("creating {}", log.display()),
            source,
        })?;
        let err = out.try_clone().map_err(|source| BenchError::Io {
            context: "relay log".into(),
            source,
        })?;
        let mut command = Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command.spawn().map_err(|source| BenchError::Io {
            context: format!("starting relay {cmd:?}"),
            source,
        })?;
        Ok(RelayProcess {
            pid: child.id(),
            child: Some(child),
            log,
        })
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGTERM to the group, wait up to [`STOP_GRACE`], then SIGKILL; reaps the child.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let group = format!("-{}", self.pid);
        if matches!(child.try_wait(), Ok(None)) {
            signal("TERM", &group);
            let until = Instant::now() + STOP_GRACE;
            while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // The leader may be gone while a shell wrapper's children live on: kill the group.
        signal("KILL", &group);
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn signal(sig: &str, target: &str) {
    let _ = Command::new("kill")
        .args(["-s", sig, "--", target])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_handles_quotes_and_spots_shell_syntax() {
        assert_eq!(
            split_command(r#"carbon-c-relay -f '/tmp/a b.conf' -p "2003""#).unwrap(),
            vec!["carbon-c-relay", "-f", "/tmp/a b.conf", "-p", "2003"]
        );
        assert!(split_command("a | b").is_none());
        assert!(split_command("echo $HOME").is_none());
        assert!(split_command("   ").is_none());
    }

    #[test]
    fn stop_kills_a_shell_wrapper_and_its_children() {
        let log = std::env::temp_dir().join(format!("anth-bench-test-{}.log", std::process::id()));
        let mut p = RelayProcess::spawn("sleep 30 & sleep 30; wait", log.clone()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let tree = super::super::measure::process_tree(p.pid);
        assert!(tree.len() >= 2, "{tree:?}");
        p.stop();
        std::thread::sleep(Duration::from_millis(100));
        for pid in tree {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false);
            assert!(!alive, "pid {pid} survived");
        }
        let _ = std::fs::remove_file(log);
    }
}
