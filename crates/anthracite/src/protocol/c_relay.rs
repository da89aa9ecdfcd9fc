//! carbon-c-relay 3.7.3's input cleansing (`dispatch_connection` in `dispatcher.c`): what a
//! line becomes before its routes see it.
//!
//! One pass over the line, copying into a scratch buffer:
//!
//! - separators (space, tab, dot) at the start are skipped; a tab becomes a space;
//! - the first space ends the name (a dot just before it is removed);
//! - every other separator is dropped when it repeats the one before it, or when it directly
//!   follows the first space: `a..b  1  2` becomes `a.b 1 2`;
//! - in the name, a byte other than `[A-Za-z0-9]` and the allowed characters (`-c`, default
//!   `-_:#`) becomes `_`; after the name (value, timestamp, tags) bytes are kept as they are;
//! - unless `;` is allowed, the first `;` starts the tags: it ends the name as a space would,
//!   and what follows it is copied like the text after the name.
//!
//! The value and timestamp text are forwarded as received (after the separator rules), never
//! parsed. A line without a space after its name is discarded (carbon-c-relay counts it in
//! `discards`).

/// carbon-c-relay's cleansing rules for one relay: the allowed characters and whether `;`
/// starts tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cleansing {
    /// Bytes allowed in a name besides `[A-Za-z0-9]`.
    allowed: [bool; 256],
    /// `;` starts tags (it is not an allowed character).
    tags: bool,
    /// Bytes copied as they are, in the name and after it (before the tags, and in them):
    /// the rest take the rules above one at a time. Runs of these are copied whole, which
    /// is most of every line.
    plain: [[bool; 256]; 3],
}

/// Indices of [`Cleansing::plain`].
const NAME: usize = 0;
const REST_BEFORE_TAGS: usize = 1;
const REST: usize = 2;

impl Default for Cleansing {
    fn default() -> Self {
        Self::new(b"-_:#")
    }
}

impl Cleansing {
    /// The rules for `-c allowed` (carbon-c-relay's default is `-_:#`).
    pub(crate) fn new(allowed: &[u8]) -> Self {
        let mut set = [false; 256];
        for &b in allowed {
            set[usize::from(b)] = true;
        }
        // `strchr` finds the terminating NUL too, but a NUL never reaches the test.
        set[0] = false;
        let tags = !allowed.contains(&b';');
        let mut plain = [[false; 256]; 3];
        for c in 0..=255u8 {
            let special = matches!(c, 0 | b' ' | b'\t' | b'.' | b'\n' | b'\r');
            let tag = c == b';' && tags;
            plain[NAME][usize::from(c)] =
                !special && !tag && (c.is_ascii_alphanumeric() || set[usize::from(c)]);
            plain[REST_BEFORE_TAGS][usize::from(c)] = !special && !tag;
            plain[REST][usize::from(c)] = !special;
        }
        Self {
            allowed: set,
            tags,
            plain,
        }
    }

    /// Where the name of `line` ends when cleansing would leave the line as it is (no
    /// separator to drop, no byte to replace, no tab, no line end inside), which is how
    /// nearly every line arrives; `None` otherwise (then [`cleanse`](Self::cleanse) it).
    /// Reading it in place saves copying every line.
    pub(crate) fn unchanged(&self, line: &[u8]) -> Option<usize> {
        let name = &self.plain[NAME];
        // A separator at the start is dropped: start as if after one.
        let mut prev = b'.';
        let mut i = 0;
        let firstspace = loop {
            let c = *line.get(i)?;
            if !name[usize::from(c)] {
                match c {
                    b'.' if prev != b'.' => {}
                    // A dot before the first space is dropped.
                    b' ' if prev != b'.' => break i,
                    b';' if self.tags && i > 0 => break i,
                    _ => return None,
                }
            }
            prev = c;
            i += 1;
        };
        // After the name a separator is dropped when it repeats the byte before it or
        // directly follows the first space; a `;` still looked for starts the tags.
        let rest = if self.tags && line[firstspace] == b' ' {
            &self.plain[REST_BEFORE_TAGS]
        } else {
            &self.plain[REST]
        };
        let mut prev = line[firstspace];
        let mut after_first = true;
        for &c in &line[firstspace + 1..] {
            if !rest[usize::from(c)] && (after_first || prev == c || !matches!(c, b' ' | b'.')) {
                return None;
            }
            prev = c;
            after_first = false;
        }
        Some(firstspace)
    }

    /// Cleanses `line` (without its newline) into `out` (replacing its contents) and returns
    /// where the name ends in `out` (the first space, or the `;` of the tags), or `None` when
    /// the line is discarded (nothing left, or no space after the name).
    pub(crate) fn cleanse(&self, line: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        out.clear();
        out.reserve(line.len());
        let mut firstspace: Option<usize> = None;
        let mut search_tags = self.tags;
        let mut i = 0;
        while i < line.len() {
            let plain = &self.plain[match (firstspace, search_tags) {
                (None, _) => NAME,
                (Some(_), true) => REST_BEFORE_TAGS,
                (Some(_), false) => REST,
            }];
            let run = line[i..]
                .iter()
                .position(|&c| !plain[usize::from(c)])
                .map_or(line.len(), |n| i + n);
            out.extend_from_slice(&line[i..run]);
            let Some(&c) = line.get(run) else {
                break;
            };
            i = run + 1;
            if !self.byte(c, out, &mut firstspace, &mut search_tags) {
                break;
            }
        }
        if out.is_empty() {
            return None;
        }
        firstspace
    }

    /// carbon-c-relay's rule for one byte `c` of a line, appended to `out` as it applies it
    /// (`firstspace` and `search_tags` carried from byte to byte); false at the end of the line.
    #[inline]
    fn byte(
        &self,
        c: u8,
        out: &mut Vec<u8>,
        firstspace: &mut Option<usize>,
        search_tags: &mut bool,
    ) -> bool {
        match c {
            b'\n' | b'\r' => return false,
            b' ' | b'\t' | b'.' => {
                let Some(&last) = out.last() else {
                    return true;
                };
                let c = if c == b'\t' { b' ' } else { c };
                if c == b' ' && firstspace.is_none() {
                    if last == b'.' {
                        out.pop();
                    }
                    *firstspace = Some(out.len());
                    out.push(b' ');
                } else if last != c && Some(out.len() - 1) != *firstspace {
                    out.push(c);
                }
            }
            b';' if *search_tags => {
                *search_tags = false;
                *firstspace = Some(out.len());
                out.push(c);
            }
            _ => {
                let keep = c != 0
                    && (firstspace.is_some()
                        || c.is_ascii_alphanumeric()
                        || self.allowed[usize::from(c)]);
                out.push(if keep { c } else { b'_' });
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cleanse(allowed: &[u8], line: &str) -> Option<String> {
        let mut out = Vec::new();
        Cleansing::new(allowed)
            .cleanse(line.as_bytes(), &mut out)
            .map(|_| String::from_utf8_lossy(&out).into_owned())
    }

    #[test]
    fn separators_collapse_and_lead_nowhere() {
        let d = b"-_:#";
        assert_eq!(cleanse(d, "..a..b. 1  2").as_deref(), Some("a.b 1 2"));
        assert_eq!(cleanse(d, "a\tb 1.50\t17").as_deref(), Some("a b 1.50 17"));
        assert_eq!(cleanse(d, "a  .5 3").as_deref(), Some("a 5 3"));
        assert_eq!(cleanse(d, "  a 1..0 2").as_deref(), Some("a 1.0 2"));
    }

    #[test]
    fn characters_outside_the_set_become_underscores_in_the_name_only() {
        let d = b"-_:#";
        assert_eq!(cleanse(d, "a/b@c 1! 2").as_deref(), Some("a_b_c 1! 2"));
        assert_eq!(cleanse(b"/", "a/b@c 1 2").as_deref(), Some("a/b_c 1 2"));
        assert_eq!(cleanse(d, "a\0b 1 2").as_deref(), Some("a_b 1 2"));
    }

    #[test]
    fn a_semicolon_starts_the_tags_unless_allowed() {
        let d = b"-_:#";
        assert_eq!(
            cleanse(d, "a.b;t=v/x;u=w 1 2").as_deref(),
            Some("a.b;t=v/x;u=w 1 2")
        );
        let mut out = Vec::new();
        assert_eq!(Cleansing::new(d).cleanse(b"a.b;t=v 1 2", &mut out), Some(3));
        assert_eq!(cleanse(b";", "a;b 1 2").as_deref(), Some("a;b 1 2"));
        assert_eq!(cleanse(b"-", "a;b 1 2").as_deref(), Some("a;b 1 2"));
    }

    /// The rules one byte at a time, as carbon-c-relay applies them: the reference the
    /// cleansing by runs is held to.
    fn bytewise(rules: &Cleansing, line: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        out.clear();
        let mut firstspace: Option<usize> = None;
        let mut search_tags = rules.tags;
        for &c in line {
            if !rules.byte(c, out, &mut firstspace, &mut search_tags) {
                break;
            }
        }
        if out.is_empty() {
            return None;
        }
        firstspace
    }

    #[test]
    fn runs_cleanse_as_the_rules_one_byte_at_a_time() {
        let alphabet = b"ab9.. \t;;_-:#/@=\0\r\nxyz";
        let mut rng = fastrand::Rng::with_seed(7);
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        for allowed in [&b"-_:#"[..], b";", b"-/.", b""] {
            let rules = Cleansing::new(allowed);
            for _ in 0..20_000 {
                let len = rng.usize(0..24);
                let line: Vec<u8> = (0..len)
                    .map(|_| alphabet[rng.usize(..alphabet.len())])
                    .collect();
                let a = rules.cleanse(&line, &mut fast);
                let b = bytewise(&rules, &line, &mut slow);
                assert_eq!(
                    (a, &fast),
                    (b, &slow),
                    "{:?}",
                    String::from_utf8_lossy(&line)
                );
            }
        }
    }

    #[test]
    fn clean_lines_are_read_in_place() {
        let rules = Cleansing::default();
        assert_eq!(rules.unchanged(b"a.b-c.d_e 1.5 1700000000"), Some(9));
        assert_eq!(rules.unchanged(b"a.b;t=v 1 2"), Some(3));
        for dirty in [
            &b".a 1 2"[..],
            b"a..b 1 2",
            b"a. 1 2",
            b"a  1 2",
            b"a 1  2",
            b"a/b 1 2",
            b"a\tb 1",
            b"a 1 2\r",
            b"a",
        ] {
            assert_eq!(
                rules.unchanged(dirty),
                None,
                "{:?}",
                String::from_utf8_lossy(dirty)
            );
        }
    }

    #[test]
    fn lines_without_a_value_are_discarded() {
        assert_eq!(cleanse(b"", "abc"), None);
        assert_eq!(cleanse(b"", "..."), None);
        assert_eq!(cleanse(b"", ""), None);
        assert_eq!(cleanse(b"", "a 1\r\n"), Some("a 1".into()));
    }
}
