//! POSIX extended regular expressions, as the C library compiles them: the expressions of a
//! carbon-c-relay configuration (`match`, `rewrite`, `aggregate`, `validate`, `route using`).
//!
//! carbon-c-relay hands its expressions to `regcomp(…, REG_EXTENDED)` and matches them with
//! `regexec`, so what an expression means is what the C library says: leftmost-*longest*
//! matches with POSIX subexpression rules (the `regex` crate's leftmost-first alternation
//! would capture differently), `\s`/`\w`/`\<` as GNU extensions, a backslash inside a bracket
//! expression taken literally, `\d` meaning `d`. Rather than translate one dialect into another
//! and hope, anthracite calls the same functions (glibc's, on Debian, as the packaged
//! carbon-c-relay does). Expressions are compiled case-sensitively and without a locale (the
//! process never calls `setlocale`, so bytes are bytes), as carbon-c-relay runs them.
//!
//! glibc's `regexec` takes a lock inside each compiled expression, so one [`PosixRegex`] can be
//! shared by threads (they take turns on it). The relay matches expressions only for names its
//! route cache has not seen.

use std::ffi::{CStr, CString};
use std::fmt;
use std::mem::MaybeUninit;

/// glibc's `REG_STARTEND` (`<regex.h>`): the subject is `pmatch[0].rm_so..rm_eo` of the
/// buffer, which need not end with a NUL byte (names are matched in place, never copied).
const REG_STARTEND: libc::c_int = 4;

/// glibc's `struct re_pattern_buffer` (`regex_t`), to read its public `re_nsub`, which the
/// `libc` crate's mirror keeps private.
#[repr(C)]
struct GnuRegex {
    buffer: *mut libc::c_void,
    allocated: libc::size_t,
    used: libc::size_t,
    syntax: libc::c_ulong,
    fastmap: *mut libc::c_char,
    translate: *mut libc::c_char,
    re_nsub: libc::size_t,
    bitfield: u8,
}

const _: () = assert!(std::mem::size_of::<GnuRegex>() == std::mem::size_of::<libc::regex_t>());

/// Most subexpressions an expression may have, as carbon-c-relay's `RE_MAX_MATCHES` (64
/// `regmatch_t` slots, the first for the whole match).
pub const MAX_MATCHES: usize = 64;

/// Most copies of its parts an expression may expand into when compiled (see
/// [`expanded_size`]): about 25 MiB of glibc's compiled form at worst, and hundreds of times
/// what any expression of a real configuration needs.
pub const MAX_EXPANDED_SIZE: u64 = 50_000;

/// An expression the C library refused, with its message (`regerror`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PosixRegexError {
    /// `regerror`'s text, e.g. `Unmatched ( or \(`.
    pub message: String,
}

/// One compiled POSIX extended regular expression.
pub struct PosixRegex {
    /// Boxed: `regcomp` may keep pointers into the `regex_t` it filled, so it never moves.
    compiled: Box<libc::regex_t>,
    /// Parenthesised subexpressions (`re_nsub`).
    groups: usize,
}

// SAFETY: a `regex_t` holds no thread-bound state; glibc's `regexec` locks the compiled
// expression's own mutex while it uses it (POSIX requires `regexec` to be thread-safe), and the
// only mutation outside `regexec` is `regfree`, in `Drop`, when no reference is left.
unsafe impl Send for PosixRegex {}
// SAFETY: see `Send`: concurrent `regexec` calls on one expression are serialised by glibc.
unsafe impl Sync for PosixRegex {}

/// Where a match and its subexpressions lie in the subject (byte offsets; `None` for a
/// subexpression that took no part in the match).
pub type Spans = [Option<(usize, usize)>; MAX_MATCHES];

impl PosixRegex {
    /// Compiles `pattern` with `REG_EXTENDED`, as carbon-c-relay does. An expression whose
    /// repetitions would expand past [`MAX_EXPANDED_SIZE`] is refused before `regcomp` sees it:
    /// glibc copies a repeated subexpression once per repetition, so `a\++++…` or
    /// `((a{9}){9}){9}` takes memory exponential in its length (carbon-c-relay, calling the same
    /// `regcomp`, runs out of memory on it).
    pub fn new(pattern: &str) -> Result<Self, PosixRegexError> {
        let size = expanded_size(pattern.as_bytes());
        if size > MAX_EXPANDED_SIZE {
            return Err(PosixRegexError {
                message: format!(
                    "expression too large: its repetitions expand into more than \
                     {MAX_EXPANDED_SIZE} copies of its parts when compiled"
                ),
            });
        }
        let text = CString::new(pattern).map_err(|_| PosixRegexError {
            message: "expression contains a NUL byte".into(),
        })?;
        let mut compiled: Box<MaybeUninit<libc::regex_t>> = Box::new(MaybeUninit::zeroed());
        // SAFETY: `compiled` points to writable memory of the size of a `regex_t`; `text` is a
        // NUL-terminated string that outlives the call.
        let rc = unsafe { libc::regcomp(compiled.as_mut_ptr(), text.as_ptr(), libc::REG_EXTENDED) };
        if rc != 0 {
            // SAFETY: regcomp failed, so the struct is in the state regerror expects (it only
            // reads it for context); the buffer is large enough and NUL-terminated by regerror.
            let message = unsafe {
                let mut buf = [0 as libc::c_char; 256];
                libc::regerror(rc, compiled.as_ptr(), buf.as_mut_ptr(), buf.len());
                CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
            };
            return Err(PosixRegexError { message });
        }
        // SAFETY: regcomp returned 0, so it initialised the whole `regex_t`.
        let compiled = unsafe { Box::from_raw(Box::into_raw(compiled).cast::<libc::regex_t>()) };
        // SAFETY: `GnuRegex` is glibc's layout of `regex_t` (same size, checked at compile
        // time); `re_nsub` is its documented public member, set by regcomp.
        let groups = unsafe { (*(&*compiled as *const libc::regex_t).cast::<GnuRegex>()).re_nsub };
        let regex = Self { groups, compiled };
        if regex.groups + 1 > MAX_MATCHES {
            return Err(PosixRegexError {
                message: format!(
                    "too many match groups ({}; at most {})",
                    regex.groups,
                    MAX_MATCHES - 1
                ),
            });
        }
        Ok(regex)
    }

    /// Parenthesised subexpressions in the expression.
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// True when the expression matches somewhere in `subject`.
    #[cfg(test)]
    pub fn is_match(&self, subject: &[u8]) -> bool {
        self.exec(subject, 0).is_some()
    }

    /// The match of the expression in `subject` and its subexpressions' spans, or `None`.
    pub fn captures(&self, subject: &[u8], spans: &mut Spans) -> bool {
        match self.exec(subject, self.groups + 1) {
            Some(found) => {
                *spans = found;
                true
            }
            None => false,
        }
    }

    fn exec(&self, subject: &[u8], slots: usize) -> Option<Spans> {
        let end = libc::regoff_t::try_from(subject.len()).ok()?;
        let mut matches = [libc::regmatch_t { rm_so: 0, rm_eo: 0 }; MAX_MATCHES];
        matches[0].rm_so = 0;
        matches[0].rm_eo = end;
        // With REG_STARTEND the first slot is read as the subject's range even when no slot is
        // wanted back.
        let wanted = slots.clamp(1, MAX_MATCHES);
        // SAFETY: `self.compiled` is a live expression; with REG_STARTEND the subject is
        // `subject[0..end]`, read through the pointer and never past `end`; `matches` has
        // room for `wanted` slots.
        let rc = unsafe {
            libc::regexec(
                &*self.compiled,
                subject.as_ptr().cast::<libc::c_char>(),
                wanted,
                matches.as_mut_ptr(),
                REG_STARTEND,
            )
        };
        if rc != 0 {
            return None;
        }
        let mut spans: Spans = [None; MAX_MATCHES];
        for (slot, m) in spans.iter_mut().zip(&matches[..wanted]) {
            if let (Ok(s), Ok(e)) = (usize::try_from(m.rm_so), usize::try_from(m.rm_eo)) {
                *slot = Some((s, e));
            }
        }
        Some(spans)
    }
}

/// How many atoms `pattern` expands into as glibc compiles it (saturating): a repetition
/// copies what it repeats, `x+` as `xx*` (twice), `x{n,m}` as `m` copies (`x{n,}` as `n + 1`),
/// `x*` and `x?` once; a group is the sum of its parts, an alternation the sum of its
/// branches. A bracket expression, an escape and any other byte are one atom. Only an
/// estimate for the bound: syntax errors are left to `regcomp`.
fn expanded_size(pattern: &[u8]) -> u64 {
    // Per open group: the size so far and the size of its last atom (what a quantifier
    // repeats).
    let mut frames: Vec<(u64, u64)> = vec![(0, 0)];
    let mut i = 0;
    while i < pattern.len() {
        let (atom, next) = match pattern[i] {
            b'(' => {
                frames.push((0, 0));
                (None, i + 1)
            }
            b')' if frames.len() > 1 => {
                let (inner, _) = frames.pop().unwrap_or_default();
                (Some(inner), i + 1)
            }
            b'\\' => (Some(1), i + 2),
            b'[' => (Some(1), bracket_end(pattern, i)),
            b'{' => match interval(pattern, i) {
                Some((times, end)) => {
                    if let Some((total, last)) = frames.last_mut() {
                        let grown = last.saturating_mul(times.max(1));
                        *total = total.saturating_add(grown - *last);
                        *last = grown;
                    }
                    (None, end)
                }
                None => (Some(1), i + 1),
            },
            b'+' => {
                if let Some((total, last)) = frames.last_mut() {
                    *total = total.saturating_add(*last);
                    *last = last.saturating_mul(2);
                }
                (None, i + 1)
            }
            b'|' => {
                if let Some((_, last)) = frames.last_mut() {
                    *last = 0;
                }
                (None, i + 1)
            }
            b'*' | b'?' => (None, i + 1),
            _ => (Some(1), i + 1),
        };
        if let (Some(size), Some((total, last))) = (atom, frames.last_mut()) {
            *total = total.saturating_add(size);
            *last = size;
        }
        i = next;
    }
    // Groups left open are a syntax error for regcomp; count them anyway.
    frames.iter().map(|&(t, _)| t).fold(0, u64::saturating_add)
}

/// The index after the bracket expression starting at `start` (`[`): a `]` first (after an
/// optional `^`) is a member, `[:class:]`, `[=e=]` and `[.c.]` are skipped whole.
fn bracket_end(pattern: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    if pattern.get(i) == Some(&b'^') {
        i += 1;
    }
    if pattern.get(i) == Some(&b']') {
        i += 1;
    }
    while i < pattern.len() {
        match (pattern[i], pattern.get(i + 1)) {
            (b'[', Some(&c @ (b':' | b'=' | b'.'))) => {
                let close = [c, b']'];
                i = pattern[i + 2..]
                    .windows(2)
                    .position(|w| w == close)
                    .map_or(pattern.len(), |p| i + 2 + p + 2);
            }
            (b']', _) => return i + 1,
            _ => i += 1,
        }
    }
    pattern.len()
}

/// The copies `{n}`, `{n,}`, `{,m}` or `{n,m}` at `start` makes (`m`, or `n + 1` when
/// unbounded) and the index after it; `None` when it is no interval.
fn interval(pattern: &[u8], start: usize) -> Option<(u64, usize)> {
    let close = start + pattern[start..].iter().position(|&b| b == b'}')?;
    let body = std::str::from_utf8(&pattern[start + 1..close]).ok()?;
    let number = |t: &str| -> Option<u64> {
        if t.is_empty() {
            Some(0)
        } else if t.bytes().all(|b| b.is_ascii_digit()) {
            Some(t.parse().unwrap_or(u64::MAX))
        } else {
            None
        }
    };
    let times = match body.split_once(',') {
        None => number(body)?,
        Some((n, "")) => number(n)?.saturating_add(1),
        Some((n, m)) => number(n)?.max(number(m)?),
    };
    Some((times, close + 1))
}

impl Drop for PosixRegex {
    fn drop(&mut self) {
        // SAFETY: the expression was compiled by regcomp and is freed once, here.
        unsafe { libc::regfree(&mut *self.compiled) };
    }
}

impl fmt::Debug for PosixRegex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixRegex")
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(re: &str, subject: &str) -> Option<Vec<Option<(usize, usize)>>> {
        let re = PosixRegex::new(re).expect("compiles");
        let mut s = [None; MAX_MATCHES];
        re.captures(subject.as_bytes(), &mut s)
            .then(|| s[..=re.groups()].to_vec())
    }

    #[test]
    fn alternation_is_leftmost_longest_as_posix_says() {
        // Leftmost-first (Perl, the `regex` crate) would take `a`; POSIX takes the longest.
        assert_eq!(
            spans("(a|ab)(c|bcd)", "abcd"),
            Some(vec![Some((0, 4)), Some((0, 1)), Some((1, 4))])
        );
    }

    #[test]
    fn gnu_classes_and_bracket_backslashes_mean_what_glibc_says() {
        let re = PosixRegex::new(r"^a\sb$").expect("\\s is a GNU extension");
        assert!(re.is_match(b"a b"));
        // `\d` is an escaped `d`, not a digit.
        assert!(PosixRegex::new(r"^\d$").expect("compiles").is_match(b"d"));
        // Inside brackets a backslash is itself.
        let re = PosixRegex::new(r"^[\.]$").expect("compiles");
        assert!(re.is_match(b"\\") && re.is_match(b"."));
    }

    #[test]
    fn the_subject_needs_no_nul_and_may_be_a_slice() {
        let re = PosixRegex::new("c$").expect("compiles");
        let text = b"abc def";
        assert!(re.is_match(&text[..3]));
        assert!(!re.is_match(text));
    }

    #[test]
    fn errors_carry_the_c_library_message_and_groups_are_counted() {
        let err = PosixRegex::new("(unclosed").expect_err("refused");
        assert!(!err.message.is_empty(), "{err}");
        assert_eq!(PosixRegex::new("(a)(b(c))").expect("ok").groups(), 3);
        assert!(PosixRegex::new(&"(a)".repeat(64)).is_err());
    }

    #[test]
    fn repetitions_that_expand_past_the_bound_are_refused_before_regcomp() {
        // 70 nested `+` (from the configuration fuzzer): glibc's regcomp took all memory.
        let bomb = format!(r"a\.([^.]+)\{}.count", "+".repeat(70));
        let err = PosixRegex::new(&bomb).expect_err("refused");
        assert!(err.message.contains("too large"), "{err}");
        assert!(PosixRegex::new("((a{40}){40}){40}").is_err());
        assert!(PosixRegex::new("(x|y{9999}){9}").is_err());
        // What configurations use stays well inside it.
        for ok in [
            r"^(carbon|collectd)\.([^.]+)\.(.+)$",
            "[]a-z[:digit:]{}]{1,300}",
            "a{2,}b{,5}",
            "((a+)+)+",
            "x{1000}",
        ] {
            PosixRegex::new(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(expanded_size(b"((a+)+)+"), 8);
        assert_eq!(expanded_size(b"[^.]+x{3}|y"), 6);
        assert_eq!(expanded_size(b"a{2,5}"), 5);
    }

    #[test]
    fn unmatched_groups_have_no_span() {
        assert_eq!(spans("(x)?b", "b"), Some(vec![Some((0, 1)), None]));
    }
}
