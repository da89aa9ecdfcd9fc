//! Python 3's `configparser.ConfigParser`, as carbon 1.1.10 reads `carbon.conf` and
//! `relay-rules.conf` with it.
//!
//! What is reproduced: `[section]` headers (the text between the first `[` and the last `]`),
//! `[DEFAULT]` feeding every section, `key = value` and `key: value` (the first `=` or `:`
//! splits), keys lower-cased, values stripped, whole-line comments starting with `#` or `;`
//! (no inline comments: `a = b # c` is the value `b # c`, as in Python), indented continuation
//! lines joined with `\n`, duplicate sections or keys are errors (Python's `strict=True`), and
//! `BasicInterpolation`: `%%` is `%`, `%(name)s` is the (interpolated) value of `name` in the
//! same section or `[DEFAULT]`, any other `%` is an error, at most 10 levels deep.

use std::collections::HashMap;

use crate::protocol::number::parse_py_int;

/// Why a file is not what `configparser` accepts.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum IniError {
    /// A line that is neither a header, an option, a comment nor a continuation.
    #[error("line {line}: {message}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// `%` interpolation failed in a value.
    #[error("[{section}] {key}: {message}")]
    Interpolation {
        /// The section read.
        section: String,
        /// The key (lower case) whose value failed.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// A parsed file: `[DEFAULT]` plus the sections in file order, values not yet interpolated.
#[derive(Debug, Clone, Default)]
pub struct Ini {
    defaults: Vec<(String, String)>,
    sections: Vec<(String, Vec<(String, String)>)>,
}

/// Python's `MAX_INTERPOLATION_DEPTH`.
const MAX_DEPTH: usize = 10;

impl Ini {
    /// Parses the text of a file.
    pub fn parse(text: &str) -> Result<Self, IniError> {
        let mut ini = Ini::default();
        // Index into `sections` (None = DEFAULT) and the key currently receiving continuations.
        let mut current: Option<Option<usize>> = None;
        let mut last_key: Option<String> = None;
        let mut pending_blank = 0usize;
        for (i, raw_line) in text.lines().enumerate() {
            let lineno = i + 1;
            let err = |message: String| IniError::Syntax {
                line: lineno,
                message,
            };
            let stripped = raw_line.trim();
            if stripped.starts_with('#') || stripped.starts_with(';') {
                continue;
            }
            if stripped.is_empty() {
                if last_key.is_some() {
                    pending_blank += 1;
                }
                continue;
            }
            let indented = raw_line.starts_with([' ', '\t']);
            if indented && let (Some(sec), Some(key)) = (current, last_key.as_ref()) {
                let entries = ini.entries_mut(sec);
                if let Some((_, value)) = entries.iter_mut().rev().find(|(k, _)| k == key) {
                    for _ in 0..pending_blank {
                        value.push('\n');
                    }
                    value.push('\n');
                    value.push_str(stripped);
                }
                pending_blank = 0;
                continue;
            }
            pending_blank = 0;
            if let Some(rest) = stripped.strip_prefix('[')
                && let Some(close) = rest.rfind(']')
                && close > 0
            {
                let name = &rest[..close];
                last_key = None;
                if name == "DEFAULT" {
                    current = Some(None);
                } else {
                    if ini.sections.iter().any(|(n, _)| n == name) {
                        return Err(err(format!("section [{name}] appears twice")));
                    }
                    ini.sections.push((name.to_owned(), Vec::new()));
                    current = Some(Some(ini.sections.len() - 1));
                }
                continue;
            }
            let Some(sec) = current else {
                return Err(err(format!(
                    "{stripped:?} comes before any [section] header"
                )));
            };
            let Some(split) = stripped.find(['=', ':']) else {
                return Err(err(format!(
                    "{stripped:?} is not `key = value` (no `=` or `:`)"
                )));
            };
            let key = stripped[..split].trim().to_lowercase();
            let value = stripped[split + 1..].trim().to_owned();
            if key.is_empty() {
                return Err(err(format!("{stripped:?} has an empty key")));
            }
            let entries = ini.entries_mut(sec);
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(err(format!("key {key:?} appears twice in its section")));
            }
            entries.push((key.clone(), value));
            last_key = Some(key);
        }
        Ok(ini)
    }

    fn entries_mut(&mut self, section: Option<usize>) -> &mut Vec<(String, String)> {
        match section.and_then(|i| self.sections.get_mut(i)) {
            Some((_, entries)) => entries,
            None => &mut self.defaults,
        }
    }

    fn section(&self, name: &str) -> Option<&[(String, String)]> {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e.as_slice())
    }

    /// Section names in file order (`[DEFAULT]` excluded).
    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(|(n, _)| n.as_str())
    }

    /// True when `[name]` exists (`DEFAULT` is not a section, as in Python).
    pub fn has_section(&self, name: &str) -> bool {
        self.section(name).is_some()
    }

    /// True when `key` (any case) is set in `[section]` or `[DEFAULT]`.
    pub fn has_option(&self, section: &str, key: &str) -> bool {
        self.raw_get(section, &key.to_lowercase()).is_some()
    }

    fn raw_get(&self, section: &str, key: &str) -> Option<&str> {
        self.section(section)
            .and_then(|e| e.iter().find(|(k, _)| k == key))
            .or_else(|| self.defaults.iter().find(|(k, _)| k == key))
            .map(|(_, v)| v.as_str())
    }

    /// The interpolated value of `key` (any case) in `[section]` (or `[DEFAULT]`).
    pub fn get(&self, section: &str, key: &str) -> Option<Result<String, IniError>> {
        let key = key.to_lowercase();
        let raw = self.raw_get(section, &key)?;
        Some(self.interpolate(section, &key, raw, 1))
    }

    /// Every `(key, interpolated value)` of `[section]`, `[DEFAULT]` keys included, like
    /// Python's `items(section)`: DEFAULT's keys first, then the section's own new keys.
    pub fn items(&self, section: &str) -> Result<Vec<(String, String)>, IniError> {
        let own = self.section(section).unwrap_or(&[]);
        let mut keys: Vec<&str> = self.defaults.iter().map(|(k, _)| k.as_str()).collect();
        for (k, _) in own {
            if !keys.contains(&k.as_str()) {
                keys.push(k);
            }
        }
        keys.into_iter()
            .map(|k| {
                let raw = self.raw_get(section, k).unwrap_or_default();
                Ok((k.to_owned(), self.interpolate(section, k, raw, 1)?))
            })
            .collect()
    }

    fn interpolate(
        &self,
        section: &str,
        key: &str,
        raw: &str,
        depth: usize,
    ) -> Result<String, IniError> {
        let fail = |message: String| IniError::Interpolation {
            section: section.to_owned(),
            key: key.to_owned(),
            message,
        };
        if depth > MAX_DEPTH {
            return Err(fail(format!(
                "more than {MAX_DEPTH} levels of %(name)s interpolation (a loop?)"
            )));
        }
        let mut out = String::with_capacity(raw.len());
        let mut rest = raw;
        while let Some(p) = rest.find('%') {
            out.push_str(&rest[..p]);
            let after = &rest[p + 1..];
            if let Some(r) = after.strip_prefix('%') {
                out.push('%');
                rest = r;
            } else if let Some(r) = after.strip_prefix('(') {
                let Some(close) = r.find(")s") else {
                    return Err(fail(format!("bad interpolation syntax in {raw:?}")));
                };
                let name = r[..close].to_lowercase();
                let Some(value) = self.raw_get(section, &name) else {
                    return Err(fail(format!(
                        "%({name})s refers to a key that is not set in [{section}] or [DEFAULT]"
                    )));
                };
                out.push_str(&self.interpolate(section, key, value, depth + 1)?);
                rest = &r[close + 2..];
            } else {
                return Err(fail(format!(
                    "'%' must be followed by '%' or '(' in {raw:?} (write %% for a literal %)"
                )));
            }
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Python's `ConfigParser.BOOLEAN_STATES` (case-insensitive).
pub(crate) fn parse_bool(value: &str) -> Option<bool> {
    match value.to_lowercase().as_str() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Python's `int(value)` (see [`parse_py_int`]).
pub(crate) fn parse_int(value: &str) -> Option<i64> {
    parse_py_int(value)
}

/// Python's `float(value)`, including `inf`, `infinity` and `nan` in any case.
pub(crate) fn parse_float(value: &str) -> Option<f64> {
    let v = value.trim();
    if v.contains("__") || v.starts_with('_') || v.ends_with('_') {
        return None;
    }
    v.replace('_', "").parse::<f64>().ok()
}

/// carbon's list type: `[v.strip() for v in value.split(',')]`.
pub(crate) fn parse_list(value: &str) -> Vec<String> {
    value.split(',').map(|v| v.trim().to_owned()).collect()
}

/// Upper-cased key → value after `[<a>]` then `[<b>]` overrode it, carbon's `Settings.readFrom`
/// applied once per section.
pub(crate) fn overlay(
    ini: &Ini,
    sections: &[&str],
) -> Result<HashMap<String, (String, String)>, IniError> {
    let mut out = HashMap::new();
    for &section in sections {
        if !ini.has_section(section) {
            continue;
        }
        for (k, v) in ini.items(section)? {
            out.insert(k.to_uppercase(), (v, section.to_owned()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(ini: &Ini, s: &str, k: &str) -> String {
        ini.get(s, k).expect("key present").expect("interpolates")
    }

    #[test]
    fn sections_defaults_case_and_overrides() {
        let ini = Ini::parse(
            "# comment\n[DEFAULT]\nshared = d\nMAX_QUEUE_SIZE = 5\n\n[relay]\nLINE_RECEIVER_PORT = 2013\n; other comment\nmax_queue_size: 10\n[relay:b]\nLine_Receiver_Port=2113\n",
        )
        .expect("parses");
        assert_eq!(ini.sections().collect::<Vec<_>>(), vec!["relay", "relay:b"]);
        assert_eq!(get(&ini, "relay", "line_receiver_port"), "2013");
        assert_eq!(get(&ini, "relay", "SHARED"), "d");
        assert_eq!(get(&ini, "relay", "MAX_QUEUE_SIZE"), "10");
        let merged = overlay(&ini, &["relay", "relay:b"]).expect("overlay");
        assert_eq!(merged["LINE_RECEIVER_PORT"].0, "2113");
        // carbon quirk: [relay:b]'s items() include DEFAULT again, which overrides [relay].
        assert_eq!(merged["MAX_QUEUE_SIZE"].0, "5");
        let only_relay = overlay(&ini, &["relay", "relay:c"]).expect("overlay");
        assert_eq!(only_relay["MAX_QUEUE_SIZE"].0, "10");
    }

    #[test]
    fn interpolation_and_percent_escapes() {
        let ini = Ini::parse(
            "[DEFAULT]\nroot = /srv\n[relay]\nconf = %(ROOT)s/conf\nrules = %(conf)s/r.conf\npct = 80%%\nbad = 80%\nloop = %(loop)s\nmissing = %(nope)s\n",
        )
        .expect("parses");
        assert_eq!(get(&ini, "relay", "rules"), "/srv/conf/r.conf");
        assert_eq!(get(&ini, "relay", "pct"), "80%");
        for key in ["bad", "loop", "missing"] {
            let err = ini.get("relay", key).expect("present").expect_err(key);
            assert!(err.to_string().contains(key), "{err}");
        }
        assert!(
            ini.items("relay").is_err(),
            "items() interpolates every value"
        );
    }

    #[test]
    fn inline_comments_continuations_and_errors() {
        let ini = Ini::parse("[a]\nx = 1 # not a comment\ny = first\n  second\n\n  third\nz=\n")
            .expect("parses");
        assert_eq!(get(&ini, "a", "x"), "1 # not a comment");
        assert_eq!(get(&ini, "a", "y"), "first\nsecond\n\nthird");
        assert_eq!(get(&ini, "a", "z"), "");
        assert!(matches!(
            Ini::parse("x = 1\n"),
            Err(IniError::Syntax { line: 1, .. })
        ));
        assert!(Ini::parse("[a]\nx = 1\n[a]\n").is_err());
        assert!(Ini::parse("[a]\nx = 1\nX = 2\n").is_err());
        assert!(Ini::parse("[a]\njust words\n").is_err());
    }

    #[test]
    fn python_scalars() {
        for t in ["1", "yes", "TRUE", "On"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "no", "False", "OFF"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        assert_eq!(parse_bool("2"), None);
        assert_eq!(parse_int(" 1_000 "), Some(1000));
        assert_eq!(parse_int("-5"), Some(-5));
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_float("inf"), Some(f64::INFINITY));
        assert_eq!(parse_float("Infinity"), Some(f64::INFINITY));
        assert_eq!(parse_float("0.8"), Some(0.8));
        assert_eq!(parse_float("1e3"), Some(1000.0));
        assert_eq!(parse_float("x"), None);
        assert_eq!(parse_list("a:1, b:2 ,"), vec!["a:1", "b:2", ""]);
    }
}
