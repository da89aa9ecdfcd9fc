//! carbon's tagged-name normalisation (`TaggedSeries.parse(name).path`), applied before routing
//! when `TAG_RELAY_NORMALIZED` is on.
//!
//! Two input forms, as carbon 1.1.10 parses them:
//! - carbon: `name;tag=value;…`;
//! - OpenMetrics, when the name ends with `"}` and holds a `{`: `name{tag="value",…}` (values
//!   may escape `"` and `\`).
//!
//! The output is the name with leading `~` removed, then `;tag=value` for every tag but `name`,
//! sorted as strings (a repeated tag keeps its last value). Where carbon's parser raises (an
//! empty tag or value, a value starting with `~`, a tag holding `;!^=`, a value holding `;`, a
//! name left empty) carbon routes the name unchanged, and so does [`normalize`] (it returns
//! `None`).

use std::sync::Arc;

use crate::name_cache::{Lookup, NameCache};

/// The normalised form of `name`, or `None` when carbon would keep the name as it is because it
/// does not parse.
pub(crate) fn normalize(name: &str) -> Option<String> {
    let (metric, mut tags) = if name.ends_with("\"}") && name.contains('{') {
        parse_openmetrics(name)?
    } else {
        parse_carbon(name)?
    };
    let base = metric.trim_start_matches('~');
    if base.is_empty() {
        return None;
    }
    // A dict in carbon: the last value of a repeated tag wins; `name` is replaced by the metric.
    let mut seen: Vec<(String, String)> = Vec::with_capacity(tags.len());
    for (tag, value) in tags.drain(..) {
        if tag == "name" {
            continue;
        }
        match seen.iter_mut().find(|(t, _)| *t == tag) {
            Some(entry) => entry.1 = value,
            None => seen.push((tag, value)),
        }
    }
    let mut parts: Vec<String> = seen.into_iter().map(|(t, v)| format!(";{t}={v}")).collect();
    parts.sort_unstable();
    let mut out = String::with_capacity(name.len());
    out.push_str(base);
    for p in parts {
        out.push_str(&p);
    }
    Some(out)
}

fn valid(tag: &str, value: &str) -> bool {
    !tag.is_empty()
        && !value.is_empty()
        && !tag.contains([';', '!', '^', '='])
        && !value.contains(';')
        && !value.starts_with('~')
}

type Parsed<'a> = (&'a str, Vec<(String, String)>);

fn parse_carbon(name: &str) -> Option<Parsed<'_>> {
    let mut segments = name.split(';');
    let metric = segments.next().filter(|m| !m.is_empty())?;
    let mut tags = Vec::new();
    for segment in segments {
        let (tag, value) = segment.split_once('=')?;
        if !valid(tag, value) {
            return None;
        }
        tags.push((tag.to_string(), value.to_string()));
    }
    Some((metric, tags))
}

fn parse_openmetrics(name: &str) -> Option<Parsed<'_>> {
    // `path[0:-1].split('{', 2)` unpacked into exactly two parts.
    let body = &name[..name.len() - 1];
    let mut halves = body.splitn(3, '{');
    let metric = halves.next()?;
    let mut raw = halves.next()?;
    if halves.next().is_some() || metric.is_empty() {
        return None;
    }
    let mut tags = Vec::new();
    while !raw.is_empty() {
        // ([^=]+)="((?:[\\]["\\]|[^"\\])+)"(:?,|$)
        let eq = raw.find('=')?;
        let tag = &raw[..eq];
        let rest = raw[eq..].strip_prefix("=\"")?;
        if tag.is_empty() {
            return None;
        }
        let bytes = rest.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' if matches!(bytes.get(i + 1), Some(b'"' | b'\\')) => i += 2,
                b'"' | b'\\' => break,
                _ => i += 1,
            }
        }
        if i == 0 || bytes.get(i) != Some(&b'"') {
            return None;
        }
        let escaped = &rest[..i];
        let after = &rest[i + 1..];
        raw = if let Some(r) = after.strip_prefix(":,") {
            r
        } else if let Some(r) = after.strip_prefix(',') {
            r
        } else if after.is_empty() {
            after
        } else {
            return None;
        };
        let value = escaped.replace("\\\"", "\"").replace("\\\\", "\\");
        if !valid(tag, &value) {
            return None;
        }
        tags.push((tag.to_string(), value));
    }
    Some((metric, tags))
}

/// True when [`normalize`] cannot change `name`: no `;` (no carbon tags), no leading `~`, and
/// not ending with `"}` (no OpenMetrics form). Such a name parses as a bare metric and comes
/// back unchanged (or, not being UTF-8, is never parsed).
#[inline]
fn is_plain(name: &[u8]) -> bool {
    name.first() != Some(&b'~') && !name.ends_with(b"\"}") && memchr::memchr(b';', name).is_none()
}

/// Per-ingestor view of carbon's tag normalisation: names repeat, so each distinct name is
/// parsed once per relay, its normalised form kept in a byte-bounded [`NameCache`] shared by
/// every ingestor (an empty value: the name stays as it is).
#[derive(Debug)]
pub(crate) struct TagNormalizer {
    memo: Arc<NameCache>,
    /// The normalised form of the last name, when it differs from the name.
    out: Vec<u8>,
}

impl TagNormalizer {
    /// A normaliser memoising in `memo` (shared by the relay's normalisers).
    pub(crate) fn new(memo: Arc<NameCache>) -> Self {
        Self {
            memo,
            out: Vec::new(),
        }
    }

    /// `name` in carbon's normalised form (memoised), or `name` itself.
    #[inline]
    pub(crate) fn apply<'a>(&'a mut self, name: &'a [u8]) -> &'a [u8] {
        if is_plain(name) {
            // Neither hashed nor looked up: an untagged name takes no room in the memo.
            return name;
        }
        let hash = self.memo.hash(name);
        let out = &mut self.out;
        if let Lookup::Miss { admit } = self.memo.lookup(hash, name, out) {
            out.clear();
            // `None` and "unchanged" are both stored as an empty value: a normalised name is
            // never empty.
            if let Some(n) = std::str::from_utf8(name).ok().and_then(normalize)
                && n.as_bytes() != name
            {
                out.extend_from_slice(n.as_bytes());
            }
            if admit {
                self.memo.insert(hash, name, out);
            }
        }
        if self.out.is_empty() { name } else { &self.out }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{TagNormalizer, normalize};
    use crate::name_cache::NameCache;

    /// Names the shortcut skips come back exactly as `normalize` would give them, and take no
    /// room in the memo; tagged ones are normalised and memoised.
    #[test]
    fn untagged_names_skip_the_memo_and_stay_as_they_are() {
        let memo = Arc::new(NameCache::new(1 << 20));
        let mut n = TagNormalizer::new(memo.clone());
        let untagged: &[&[u8]] = &[
            b"a.b.c",
            b"x",
            b"a~b",
            b"cpu{host=1}",
            b"a\"}b",
            b"\xff\xfe.bad.utf8",
            "m.\u{fc}.\u{65e5}".as_bytes(),
        ];
        for _ in 0..3 {
            for &name in untagged {
                let want = std::str::from_utf8(name)
                    .ok()
                    .and_then(normalize)
                    .map_or(name.to_vec(), String::into_bytes);
                assert_eq!(
                    n.apply(name),
                    &want[..],
                    "{}",
                    String::from_utf8_lossy(name)
                );
            }
        }
        assert!(memo.is_empty(), "untagged names were memoised");
        let tagged: &[(&[u8], &[u8])] = &[
            (b"a.b;z=1;a=2", b"a.b;a=2;z=1"),
            (b"~a.b", b"a.b"),
            (b"cpu{host=\"h1\",dc=\"x\"}", b"cpu;dc=x;host=h1"),
            (b"a;b", b"a;b"),
        ];
        for _ in 0..3 {
            for &(name, want) in tagged {
                assert_eq!(n.apply(name), want, "{}", String::from_utf8_lossy(name));
            }
        }
        assert_eq!(
            memo.len(),
            tagged.len(),
            "tagged names seen twice are memoised"
        );
    }

    /// Expected values printed by carbon 1.1.10's own `TaggedSeries.parse(name).path` (Python
    /// 3.11, the venv the test support builds); `None` where it raises.
    #[test]
    fn matches_carbon_tagged_series() {
        let cases: &[(&str, Option<&str>)] = &[
            ("a.b;z=1;a=2", Some("a.b;a=2;z=1")),
            ("a.b", Some("a.b")),
            ("~a.b;x=1", Some("a.b;x=1")),
            ("~~~", None),
            ("a;name=zz;b=1", Some("a;b=1")),
            ("a;b=1;b=2", Some("a;b=2")),
            ("a;b", None),
            ("a;=1", None),
            ("a;b=", None),
            ("a;b=~x", None),
            ("a;b!=1", None),
            ("a;b=1;ab=2;a=3", Some("a;a=3;ab=2;b=1")),
            ("cpu{host=\"h1\",dc=\"x\"}", Some("cpu;dc=x;host=h1")),
            ("cpu{host=\"h\\\"1\",dc=\"x\"}", Some("cpu;dc=x;host=h\"1")),
            ("cpu{host=\"h1\":,dc=\"x\"}", Some("cpu;dc=x;host=h1")),
            ("cpu{a{b=\"1\"}", None),
            ("{a=\"1\"}", None),
            ("m;ü=ö;a=日", Some("m;a=日;ü=ö")),
            ("a.b;z=1;a=2;", None),
            ("a;x=1=2", Some("a;x=1=2")),
            (";a=1", None),
            ("cpu{host=\"a\\\\b\"}", Some("cpu;host=a\\b")),
            ("x{a=\"1\",}", Some("x{a=\"1\",}")),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input).as_deref(), *want, "{input:?}");
        }
    }
}
