//! carbon-c-relay's command-line flags (`relay.c` of 3.7.3), read with its `getopt` string
//! `:hvdstf:l:p:w:b:q:L:C:T:c:m:M:H:B:U:EDP:O:` and checked as it checks them.

/// The flags, with carbon-c-relay's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CRelayFlags {
    /// `-p`: the port of the default listeners. Default 2003.
    pub port: u16,
    /// `-H`: the hostname in the statistics prefix. Default: the machine's.
    pub hostname: Option<String>,
    /// `-c`: characters allowed in names besides `[A-Za-z0-9]`. Default `-_:#`.
    pub allowed_chars: Option<String>,
    /// `-q`: datapoints a member's queue holds. Default 25000.
    pub queue_size: usize,
    /// `-b`: datapoints sent per batch. Default 2500.
    pub batch_size: usize,
    /// `-L`: stalls of a client before a full queue drops. Default 4.
    pub max_stalls: u32,
    /// `-T`: members' I/O timeout in milliseconds. Default 600.
    pub io_timeout_ms: u32,
    /// `-B`: listen backlog. Default 32.
    pub backlog: u32,
    /// `-U`: socket send/receive buffer in bytes. Default: the system's.
    pub sockbuf: Option<u32>,
    /// `-w`: worker threads (carbon-c-relay's dispatchers). Default: the online CPUs.
    pub workers: Option<u32>,
    /// `-m`: longest name in bytes. Default: no limit below `-M`.
    pub max_metric_len: Option<usize>,
    /// `-M`: longest input line in bytes. Default 32768.
    pub max_input_len: Option<usize>,
    /// `-E`: never disconnect idle clients (default: after 10 minutes).
    pub no_expire: bool,
    /// `-O`: routes before the optimiser runs (`None`: never, `-O -1`). Default 50.
    pub optimiser: Option<usize>,
    /// `-d` (count): debug output (`-t -d` prints rings and stubs).
    pub debug: u8,
    /// `-s`: submission mode (no statistics).
    pub submission: bool,
    /// `-t` (count).
    pub test: u8,
    /// `-C`: CA certificates for `ssl` members.
    pub ca: Option<String>,
    /// `-f`: the configuration (when given among the flags).
    pub config: Option<String>,
    /// Flags accepted without effect, one line each.
    pub ignored: Vec<String>,
}

impl Default for CRelayFlags {
    fn default() -> Self {
        Self {
            port: 2003,
            hostname: None,
            allowed_chars: None,
            queue_size: 25_000,
            batch_size: 2_500,
            max_stalls: 4,
            io_timeout_ms: 600,
            backlog: 32,
            sockbuf: None,
            workers: None,
            max_metric_len: None,
            max_input_len: None,
            no_expire: false,
            optimiser: Some(50),
            debug: 0,
            submission: false,
            test: 0,
            ca: None,
            config: None,
            ignored: Vec::new(),
        }
    }
}

/// carbon-c-relay's `METRIC_BUFSIZ`, the longest input line (`-M`).
pub(crate) const METRIC_BUFSIZ: usize = 32768;

/// Options that take an argument.
const WITH_ARG: &[u8] = b"flpwbqLCTcmMHBUPO";
/// Options without one.
const WITHOUT_ARG: &[u8] = b"hvdstED";

/// C's `atoi`: leading white space, a sign, digits (glibc: `(int) strtol`).
fn atoi(s: &str) -> i32 {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for d in digits.bytes().take_while(u8::is_ascii_digit) {
        v = v.saturating_mul(10).saturating_add(i64::from(d - b'0'));
    }
    (if neg { -v } else { v }) as i32
}

fn first_is_digit(s: &str) -> bool {
    s.as_bytes().first().is_some_and(u8::is_ascii_digit)
}

impl CRelayFlags {
    /// Parses `args` (without the program name), e.g. `["-p", "2103", "-H", "relay1"]`.
    /// Errors carry what carbon-c-relay says before it prints its usage.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Self, String> {
        let mut f = Self::default();
        let mut i = 0;
        while i < args.len() {
            let arg = args[i].as_ref();
            i += 1;
            if arg == "--" {
                break;
            }
            let Some(opts) = arg.strip_prefix('-').filter(|o| !o.is_empty()) else {
                // glibc's getopt moves operands aside; carbon-c-relay ignores them.
                f.ignored.push(format!("argument {arg:?} (not a flag)"));
                continue;
            };
            let bytes = opts.as_bytes();
            let mut k = 0;
            while k < bytes.len() {
                let c = bytes[k];
                k += 1;
                if WITHOUT_ARG.contains(&c) {
                    f.flag(c)?;
                    continue;
                }
                if !WITH_ARG.contains(&c) {
                    return Err(format!("unknown option -{}", char::from(c)));
                }
                let value = if k < bytes.len() {
                    let v = opts[k..].to_string();
                    k = bytes.len();
                    v
                } else if i < args.len() {
                    i += 1;
                    args[i - 1].as_ref().to_string()
                } else {
                    return Err(format!("option -{} requires an argument", char::from(c)));
                };
                f.option(c, &value)?;
            }
        }
        if f.batch_size > f.queue_size {
            return Err("batchsize must be smaller than queuesize".into());
        }
        if let (Some(m), Some(n)) = (f.max_metric_len, f.max_input_len)
            && m > 0
            && m >= n
        {
            return Err("max metric len must be smaller than max length of input string".into());
        }
        Ok(f)
    }

    fn flag(&mut self, c: u8) -> Result<(), String> {
        match c {
            b'd' => self.debug = self.debug.saturating_add(1),
            b's' => self.submission = true,
            b't' => self.test = self.test.saturating_add(1),
            b'E' => self.no_expire = true,
            b'D' => self
                .ignored
                .push("-D (daemonise): run anthracite under a service manager instead".into()),
            b'v' | b'h' => self.ignored.push(format!("-{}", char::from(c))),
            _ => {}
        }
        Ok(())
    }

    fn option(&mut self, c: u8, v: &str) -> Result<(), String> {
        let n = atoi(v);
        match c {
            b'f' => self.config = Some(v.to_string()),
            b'l' => self.ignored.push(format!(
                "-l {v} (log file): anthracite logs to stderr (the service manager keeps it)"
            )),
            b'p' => {
                let port = n as u16;
                if port == 0 {
                    return Err("port needs to be a number >0".into());
                }
                self.port = port;
            }
            b'w' => {
                let w = n as i8;
                if w <= 0 {
                    return Err("workers needs to be a number >0".into());
                }
                self.workers = Some(w as u32);
            }
            b'b' => {
                if n <= 0 {
                    return Err("batch size needs to be a number >0".into());
                }
                self.batch_size = n as usize;
            }
            b'q' => {
                if n <= 0 {
                    return Err("queue size needs to be a number >0".into());
                }
                self.queue_size = n as usize;
            }
            b'L' => {
                if !(0..16).contains(&n) || !first_is_digit(v) {
                    return Err("maximum stalls needs to be a number between 0 and 15".into());
                }
                self.max_stalls = n as u32;
            }
            b'C' => self.ca = Some(v.to_string()),
            b'T' => {
                if n <= 0 {
                    return Err("server IO timeout needs to be a number >0".into());
                }
                if n >= 60_000 {
                    return Err("server IO timeout needs to be less than one minute".into());
                }
                self.io_timeout_ms = n as u32;
            }
            b'c' => self.allowed_chars = Some(v.to_string()),
            b'm' => {
                if n < 0 || !first_is_digit(v) {
                    return Err("max metric length needs to be a number >=0".into());
                }
                self.max_metric_len = Some(n as usize);
            }
            b'M' => {
                if n <= 0 {
                    return Err("max length needs to be a number >0".into());
                }
                if n as usize > METRIC_BUFSIZ {
                    return Err(format!("max length cannot be >{METRIC_BUFSIZ}"));
                }
                self.max_input_len = Some(n as usize);
            }
            b'H' => self.hostname = Some(v.chars().take(255).collect()),
            b'B' => {
                if n <= 0 {
                    return Err("backlog needs to be a number >0".into());
                }
                self.backlog = n as u32;
            }
            b'U' => {
                if n <= 0 {
                    return Err("bufsize needs to be a number >0".into());
                }
                self.sockbuf = Some(n as u32);
            }
            b'P' => self
                .ignored
                .push(format!("-P {v} (pid file): use anthracite's --pid-file")),
            b'O' => {
                if n == 0 && !first_is_digit(v) {
                    return Err("optimiser threshold needs to be a number".into());
                }
                self.optimiser = (n >= 0).then_some(n as usize);
            }
            _ => {}
        }
        Ok(())
    }

    /// The longest input line (`-M`, else 32768).
    pub(crate) fn max_input(&self) -> usize {
        self.max_input_len.unwrap_or(METRIC_BUFSIZ)
    }

    /// The longest name (`-m`, else the longest line).
    pub(crate) fn max_metric(&self) -> usize {
        self.max_metric_len.unwrap_or_else(|| self.max_input())
    }

    /// The characters allowed besides letters and digits (`-c`, else `-_:#`).
    pub(crate) fn allowed(&self) -> &str {
        self.allowed_chars.as_deref().unwrap_or("-_:#")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_take_attached_or_separate_values() {
        let f = CRelayFlags::parse(&[
            "-dt",
            "-p2103",
            "-H",
            "relay1.example",
            "-q",
            "100",
            "-b",
            "10",
            "-O",
            "-1",
        ])
        .expect("valid");
        assert_eq!((f.debug, f.test, f.port), (1, 1, 2103));
        assert_eq!(f.hostname.as_deref(), Some("relay1.example"));
        assert_eq!((f.queue_size, f.batch_size, f.optimiser), (100, 10, None));
    }

    #[test]
    fn values_are_checked_as_carbon_c_relay_checks_them() {
        assert!(CRelayFlags::parse(&["-p", "0"]).is_err());
        assert!(CRelayFlags::parse(&["-L", "16"]).is_err());
        assert!(CRelayFlags::parse(&["-T", "60000"]).is_err());
        assert!(
            CRelayFlags::parse(&["-q", "10"]).is_err(),
            "batch 2500 > queue 10"
        );
        assert!(CRelayFlags::parse(&["-m", "100", "-M", "50"]).is_err());
        assert!(CRelayFlags::parse(&["-x"]).is_err());
        let f = CRelayFlags::parse(&["-l", "/var/log/x", "-D"]).expect("accepted");
        assert_eq!(f.ignored.len(), 2);
        // (unsigned short) atoi: 70000 wraps.
        assert_eq!(CRelayFlags::parse(&["-p", "70000"]).expect("ok").port, 4464);
    }
}
