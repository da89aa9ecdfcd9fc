//! carbon's output template, exactly: `AggregationRule.build_template` turns the output
//! pattern into a Python format string with `output.replace('<', '%(').replace('>', ')s')`,
//! and `get_aggregate_metric` formats it with the match's `groupdict()`: Python 3.11's
//! `str % dict` (`PyUnicode_Format`). [`Template::compile`] runs that formatter's parser once
//! per rule, against the input pattern's named groups, and keeps what it would write and
//! where it would raise; [`Template::render`] writes a name from the captured fields.
//!
//! What the formatter does with a dict argument (checked against Python 3.11 by
//! `tests/carbon/templates.rs`):
//!
//! - `%(key)…` looks `key` up (the key runs to the matching `)`, nested parentheses
//!   balanced): a field the pattern lacks is a `KeyError` — `<<path>>` is `%(%(path)s)s`,
//!   whose key is `%(path)s`. An unterminated key is a `ValueError`.
//! - `%` with no key takes the whole dict, once: `%s` writes `str(groupdict)`
//!   (`{'app': 'web'}`); a second keyless conversion is a `TypeError` ("not enough
//!   arguments"), and so is a keyless one after a keyed one.
//! - Flags `-+ #0`, a width, a `.precision` and `h`/`l`/`L` may follow; `*` for either is a
//!   `TypeError` (no value is an `int`); a width or precision past `isize`/`i32` is a
//!   `ValueError`. Only `-` (left-justify) changes a string conversion.
//! - `s`, `r`, `a` write `str`, `repr`, `ascii` of the value (`None` for a group that took no
//!   part in the match), truncated to the precision and padded with spaces to the width;
//!   `c` writes a one-character value and is a `TypeError` for any other (decided per name);
//!   `d i u o x X e E f F g G` are a `TypeError` (every value is a `str`); any other
//!   character, a `%` included (`%5%`), is a `ValueError`. `%%` right after `%` is a `%`.
//! - The string ending inside a conversion (a trailing `%`, `%(a)`, `%5`) is a `ValueError`.
//!
//! The first error in the string is the one raised; what carbon then does depends on its class
//! ([`TemplateFailure::stops`]).

use crate::router::hash::py_repr_into;

/// Widest conversion rendered: a wider one (`%(a)99999s`) makes a name no destination takes,
/// so the rule yields nothing for it instead of a megabyte-wide name per series.
pub(crate) const MAX_WIDTH: usize = 65_536;

/// Why carbon's formatting of a template fails, by the exception class (which decides what
/// carbon does next).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateFailure {
    /// `TypeError`: caught by `get_aggregate_metric`, which logs it and caches `None`; the rule
    /// yields nothing for that name.
    Type,
    /// `KeyError`: a field the input pattern does not capture. Not caught: it leaves
    /// `AggregationProcessor.process`.
    Key,
    /// `ValueError`: a trailing or stray `%`, an unknown conversion, an unterminated key.
    /// Not caught, like `KeyError`.
    Value,
    /// A width over `MAX_WIDTH` (65,536): Python writes the name; anthracite treats the rule as
    /// yielding nothing for it, as for a `TypeError`.
    TooWide,
}

impl TemplateFailure {
    /// True when the exception leaves carbon's aggregation step: the rules before it have
    /// taken the datapoint, the rules after it and the `FORWARD_ALL` pass-through do not
    /// happen (carbon-aggregator), or the datapoint is not relayed at all (carbon-relay's
    /// aggregated routers). False when the rule merely yields nothing for the name.
    pub fn stops(self) -> bool {
        matches!(self, Self::Key | Self::Value)
    }

    /// Python's exception class name (`TooWide` is none).
    pub fn class(self) -> &'static str {
        match self {
            Self::Type => "TypeError",
            Self::Key => "KeyError",
            Self::Value => "ValueError",
            Self::TooWide => "a width over 65536",
        }
    }
}

/// What a conversion formats: one named group's text, or the whole `groupdict()`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arg {
    Group(usize),
    Dict,
}

/// The conversion character.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Conv {
    Str,
    Repr,
    Ascii,
    Char,
}

#[derive(Clone, Debug, PartialEq)]
enum Piece {
    Text(String),
    Value {
        arg: Arg,
        conv: Conv,
        width: usize,
        precision: Option<usize>,
        left: bool,
    },
}

/// A compiled output template. See the module documentation.
#[derive(Clone, Debug)]
pub struct Template {
    pieces: Vec<Piece>,
    /// Where formatting raises for every name, after the pieces (Python's message).
    end: Option<(TemplateFailure, String)>,
    /// The pattern's named groups, in group order (the `groupdict()` keys).
    names: Vec<String>,
    /// Python's non-printable characters, for `repr`: only built for templates that call it.
    nonprintable: Option<regex::Regex>,
}

/// The formatter's parser state (the fields of CPython's `unicode_formatter_t` that matter).
struct Parser<'a> {
    fmt: Vec<char>,
    pos: usize,
    /// Characters left to read; negative once a read went past the end (the C loop's
    /// `--fmtcnt >= 0`).
    cnt: isize,
    names: &'a [String],
    /// The argument conversions take: the dict, or the value of the last `%(key)`.
    arg: Arg,
    /// Whether that argument was taken already.
    taken: bool,
    text: String,
    pieces: Vec<Piece>,
}

type Failed = (TemplateFailure, String);

impl Parser<'_> {
    /// Reads the next character into `ch`, as `if (--fmtcnt >= 0) ch = fmt[pos++]`; false
    /// (and `ch` unchanged) past the end.
    fn step(&mut self, ch: &mut char) -> bool {
        self.cnt -= 1;
        if self.cnt < 0 {
            return false;
        }
        if let Some(&c) = self.fmt.get(self.pos) {
            *ch = c;
        }
        self.pos += 1;
        true
    }

    /// `unicode_format_getnextarg`: the argument, once.
    fn next_arg(&mut self) -> Result<Arg, Failed> {
        if self.taken {
            return Err((
                TemplateFailure::Type,
                "not enough arguments for format string".into(),
            ));
        }
        self.taken = true;
        Ok(self.arg)
    }

    fn type_name(&self, arg: Arg) -> &'static str {
        match arg {
            Arg::Group(_) => "str",
            Arg::Dict => "dict",
        }
    }

    /// One conversion, `pos` just past its `%` (`unicode_format_arg` and
    /// `unicode_format_arg_parse`).
    fn conversion(&mut self) -> Result<(), Failed> {
        let mut ch = self.fmt.get(self.pos).copied().unwrap_or('\0');
        if ch == '%' {
            self.pos += 1;
            self.cnt -= 1;
            self.text.push('%');
            return Ok(());
        }
        if ch == '(' {
            self.pos += 1;
            self.cnt -= 1;
            let key_start = self.pos;
            let mut depth = 1;
            while depth > 0 && self.step(&mut ch) {
                match ch {
                    ')' => depth -= 1,
                    '(' => depth += 1,
                    _ => {}
                }
            }
            if self.cnt < 0 || depth > 0 {
                return Err((TemplateFailure::Value, "incomplete format key".into()));
            }
            let key: String = self
                .fmt
                .get(key_start..self.pos - 1)
                .unwrap_or_default()
                .iter()
                .collect();
            let Some(i) = self.names.iter().position(|n| *n == key) else {
                return Err((TemplateFailure::Key, py_repr(&key, None)));
            };
            self.arg = Arg::Group(i);
            self.taken = false;
        }
        let mut left = false;
        while self.step(&mut ch) {
            match ch {
                '-' => left = true,
                '+' | ' ' | '#' | '0' => {}
                _ => break,
            }
        }
        let mut width = 0usize;
        if ch == '*' {
            self.next_arg()?;
            return Err((TemplateFailure::Type, "* wants int".into()));
        } else if let Some(d) = ch.to_digit(10) {
            let mut w = d as isize;
            while self.step(&mut ch) {
                let Some(d) = ch.to_digit(10) else { break };
                if w > (isize::MAX - d as isize) / 10 {
                    return Err((TemplateFailure::Value, "width too big".into()));
                }
                w = w * 10 + d as isize;
            }
            width = w as usize;
        }
        let mut precision = None;
        if ch == '.' {
            let mut p: i32 = 0;
            self.step(&mut ch);
            if ch == '*' {
                self.next_arg()?;
                return Err((TemplateFailure::Type, "* wants int".into()));
            } else if let Some(d) = ch.to_digit(10) {
                p = d as i32;
                while self.step(&mut ch) {
                    let Some(d) = ch.to_digit(10) else { break };
                    if p > (i32::MAX - d as i32) / 10 {
                        return Err((TemplateFailure::Value, "precision too big".into()));
                    }
                    p = p * 10 + d as i32;
                }
            }
            precision = Some(p as usize);
        }
        if self.cnt >= 0 && matches!(ch, 'h' | 'l' | 'L') {
            self.step(&mut ch);
        }
        if self.cnt < 0 {
            return Err((TemplateFailure::Value, "incomplete format".into()));
        }
        let arg = self.next_arg()?;
        let conv = match ch {
            's' => Conv::Str,
            'r' => Conv::Repr,
            'a' => Conv::Ascii,
            'c' => Conv::Char,
            'd' | 'i' | 'u' => {
                return Err((
                    TemplateFailure::Type,
                    format!(
                        "%{ch} format: a real number is required, not {}",
                        self.type_name(arg)
                    ),
                ));
            }
            'o' | 'x' | 'X' => {
                return Err((
                    TemplateFailure::Type,
                    format!(
                        "%{ch} format: an integer is required, not {}",
                        self.type_name(arg)
                    ),
                ));
            }
            'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
                return Err((
                    TemplateFailure::Type,
                    format!("must be real number, not {}", self.type_name(arg)),
                ));
            }
            other => {
                let shown = if (' '..='~').contains(&other) {
                    other
                } else {
                    '?'
                };
                return Err((
                    TemplateFailure::Value,
                    format!(
                        "unsupported format character '{shown}' (0x{:x}) at index {}",
                        other as u32,
                        self.pos - 1
                    ),
                ));
            }
        };
        if conv == Conv::Char && arg == Arg::Dict {
            return Err((TemplateFailure::Type, "%c requires int or char".into()));
        }
        if width > MAX_WIDTH {
            return Err((
                TemplateFailure::TooWide,
                format!("width {width} makes names no destination takes"),
            ));
        }
        if !self.text.is_empty() {
            self.pieces
                .push(Piece::Text(std::mem::take(&mut self.text)));
        }
        self.pieces.push(Piece::Value {
            arg,
            conv,
            width,
            precision,
            left,
        });
        Ok(())
    }
}

impl Template {
    /// Compiles carbon's output pattern `output` for an input pattern whose named groups are
    /// `names`, in group order.
    pub fn compile(output: &str, names: &[String]) -> Self {
        let fmt: Vec<char> = output
            .replace('<', "%(")
            .replace('>', ")s")
            .chars()
            .collect();
        let len = fmt.len() as isize;
        let mut p = Parser {
            fmt,
            pos: 0,
            cnt: len,
            names,
            arg: Arg::Dict,
            taken: false,
            text: String::new(),
            pieces: Vec::new(),
        };
        let mut end = None;
        loop {
            p.cnt -= 1;
            if p.cnt < 0 {
                break;
            }
            if p.fmt.get(p.pos) != Some(&'%') {
                let run = p.fmt[p.pos..]
                    .iter()
                    .position(|&c| c == '%')
                    .map_or(p.fmt.len(), |i| p.pos + i);
                p.text.extend(&p.fmt[p.pos..run]);
                p.pos = run;
                p.cnt = len - run as isize;
                continue;
            }
            p.pos += 1;
            if let Err(failed) = p.conversion() {
                end = Some(failed);
                break;
            }
        }
        if !p.text.is_empty() && end.is_none() {
            p.pieces.push(Piece::Text(std::mem::take(&mut p.text)));
        }
        let needs_repr = p.pieces.iter().any(|piece| {
            matches!(
                piece,
                Piece::Value {
                    conv: Conv::Repr,
                    ..
                } | Piece::Value { arg: Arg::Dict, .. }
            )
        });
        Self {
            pieces: p.pieces,
            end,
            names: names.to_vec(),
            // Python's `str.isprintable`: not Other (Cc Cf Cs Co Cn) nor Separator (Zl Zp Zs)
            // but the ASCII space. The `regex` crate's Unicode tables are newer than Python
            // 3.11's (14.0): characters assigned since then count as printable here.
            nonprintable: needs_repr
                .then(|| regex::Regex::new(r"[\p{C}\p{Z}--\x20]").ok())
                .flatten(),
        }
    }

    /// The failure every name meets (a template that never formats), if any, with Python's
    /// message. A template whose failure depends on the name (`%c`) has none here.
    pub fn failure(&self) -> Option<(TemplateFailure, &str)> {
        self.end.as_ref().map(|(f, m)| (*f, m.as_str()))
    }

    /// True when some names fail and others do not (`%c` of a field: only one-character
    /// values format).
    pub fn depends_on_the_name(&self) -> bool {
        self.end.is_none()
            && self.pieces.iter().any(|p| {
                matches!(
                    p,
                    Piece::Value {
                        conv: Conv::Char,
                        ..
                    }
                )
            })
    }

    /// True when formatted names may hold white space: `str(groupdict)` (`{'a': 'x'}`) or a
    /// width that pads.
    pub fn may_hold_whitespace(&self) -> bool {
        self.pieces.iter().any(|p| match p {
            Piece::Value { arg: Arg::Dict, .. } => !self.names.is_empty(),
            Piece::Value { width, .. } => *width > 1,
            Piece::Text(_) => false,
        })
    }

    /// Writes the name for a match whose named group `i` (in the order given to
    /// [`compile`](Self::compile)) captured `group(i)` (`None`: it took no part) into `out`,
    /// or returns where carbon's formatting raises.
    pub fn render<'t>(
        &self,
        group: impl Fn(usize) -> Option<&'t str>,
        out: &mut String,
    ) -> Result<(), TemplateFailure> {
        let mut value = String::new();
        for piece in &self.pieces {
            let (arg, conv, width, precision, left) = match piece {
                Piece::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                // `%(field)s` as carbon's templates write it: the value as it is.
                Piece::Value {
                    arg: Arg::Group(i),
                    conv: Conv::Str,
                    width: 0,
                    precision: None,
                    ..
                } => {
                    out.push_str(group(*i).unwrap_or("None"));
                    continue;
                }
                Piece::Value {
                    arg,
                    conv,
                    width,
                    precision,
                    left,
                } => (*arg, *conv, *width, *precision, *left),
            };
            value.clear();
            match (arg, conv) {
                (Arg::Group(i), Conv::Str) => value.push_str(group(i).unwrap_or("None")),
                (Arg::Group(i), Conv::Repr | Conv::Ascii) => match group(i) {
                    Some(v) => self.repr_into(v, conv == Conv::Ascii, &mut value),
                    None => value.push_str("None"),
                },
                (Arg::Group(i), Conv::Char) => {
                    let mut chars = group(i).unwrap_or_default().chars();
                    match (group(i).is_some(), chars.next(), chars.next()) {
                        (true, Some(c), None) => value.push(c),
                        _ => return Err(TemplateFailure::Type),
                    }
                }
                (Arg::Dict, Conv::Char) => return Err(TemplateFailure::Type),
                (Arg::Dict, _) => {
                    value.push('{');
                    for (i, name) in self.names.iter().enumerate() {
                        if i > 0 {
                            value.push_str(", ");
                        }
                        self.repr_into(name, conv == Conv::Ascii, &mut value);
                        value.push_str(": ");
                        match group(i) {
                            Some(v) => self.repr_into(v, conv == Conv::Ascii, &mut value),
                            None => value.push_str("None"),
                        }
                    }
                    value.push('}');
                }
            }
            let mut len = value.chars().count();
            let text = match precision {
                Some(p) if conv != Conv::Char && p < len => {
                    len = p;
                    let cut = value.char_indices().nth(p).map_or(value.len(), |(b, _)| b);
                    &value[..cut]
                }
                _ => value.as_str(),
            };
            let pad = width.saturating_sub(len);
            if !left {
                out.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(text);
            if left {
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        match &self.end {
            Some((failure, _)) => Err(*failure),
            None => Ok(()),
        }
    }

    fn repr_into(&self, s: &str, ascii: bool, out: &mut String) {
        py_repr_into(s, self.nonprintable.as_ref(), ascii, out);
    }
}

/// Python's `repr(str)` (ASCII rules exactly; for other characters, `nonprintable` says
/// which are escaped, `None`: none).
fn py_repr(s: &str, nonprintable: Option<&regex::Regex>) -> String {
    let mut out = String::new();
    py_repr_into(s, nonprintable, false, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `template % groupdict` for groups `a` = "web", `b` = "x.y", `n` = None.
    fn format(template: &str) -> Result<String, TemplateFailure> {
        let names = ["a", "b", "n"].map(String::from);
        let t = Template::compile(template, &names);
        let mut out = String::new();
        let values = [Some("web"), Some("x.y"), None];
        t.render(|i| values[i], &mut out).map(|()| out)
    }

    /// Expected values from Python 3.11.7: `t.replace('<', '%(').replace('>', ')s') % d`.
    #[test]
    fn formats_as_python_does() {
        use TemplateFailure::*;
        let ok = |t: &str, want: &str| assert_eq!(format(t).as_deref(), Ok(want), "{t:?}");
        let err = |t: &str, want: TemplateFailure| assert_eq!(format(t), Err(want), "{t:?}");
        ok("agg.<a>.<b>.sum", "agg.web.x.y.sum");
        ok("a>b", "a)sb");
        ok("<n>", "None");
        ok("%%<a>", "%web");
        ok("%s", "{'a': 'web', 'b': 'x.y', 'n': None}");
        ok("%s%(a)s", "{'a': 'web', 'b': 'x.y', 'n': None}web");
        ok("%(a)r.%(a)a", "'web'.'web'");
        ok(
            "%(a)5s|%(a)-5s|%(a)05s|%(a).2s|%(a)10.1s",
            "  web|web  |  web|we|         w",
        );
        ok("%(a)+s%(a) s%(a)#s%(a)ls%(a)hs%(a)Ls", "webwebwebwebwebweb");
        ok("%(a).s", "");
        err("<<a>>", Key);
        err("<zz>", Key);
        err("<>", Key);
        err("%(zz)s%d", Key);
        err("%d%(zz)s", Type);
        err("%(a)d", Type);
        err("%x", Type);
        err("%(a)f", Type);
        err("%(a)c", Type);
        err("%c", Type);
        err("%s%s", Type);
        err("%(a)s%s", Type);
        err("%(a)*s", Type);
        err("%(a).*s", Type);
        err("%", Value);
        err("a%", Value);
        err("a<b", Value);
        err("%(a)", Value);
        err("%(a)5", Value);
        err("%(a)%", Value);
        err("%5%", Value);
        err("%(a)q", Value);
        err("%s%", Value);
        err("%(a)99999999999999999999s", Value);
        err("%(a).99999999999999999999s", Value);
        err("%(a)z%(zz)s", Value);
        err("%s%5%", Type);
        err("%(a)100000s", TooWide);
    }

    #[test]
    fn char_conversion_depends_on_the_value() {
        let names = ["h".to_owned()];
        let t = Template::compile("x.%(h)c", &names);
        assert!(t.depends_on_the_name() && t.failure().is_none());
        let mut out = String::new();
        assert_eq!(t.render(|_| Some("w"), &mut out), Ok(()));
        assert_eq!(out, "x.w");
        assert_eq!(
            t.render(|_| Some("web"), &mut String::new()),
            Err(TemplateFailure::Type)
        );
    }

    /// Expected values from Python 3.11.7's `repr` and `ascii`.
    #[test]
    fn repr_and_ascii_match_python() {
        let names = ["a".to_owned()];
        let render = |t: &str, v: &str| {
            let mut out = String::new();
            Template::compile(t, &names)
                .render(|_| Some(v), &mut out)
                .map(|()| out)
        };
        let v = "a\"b'c\\\t\x7f\u{80}é\u{200b}\u{1f600}";
        assert_eq!(
            render("%(a)r", v).as_deref(),
            Ok("'a\"b\\'c\\\\\\t\\x7f\\x80é\\u200b\u{1f600}'")
        );
        assert_eq!(
            render("%(a)a", "é\u{200b}\u{1f600}\u{80}").as_deref(),
            Ok("'\\xe9\\u200b\\U0001f600\\x80'")
        );
        assert_eq!(
            render("%(a)r", "\u{378}\u{a0}\u{2028}\u{feff}\u{e000}").as_deref(),
            Ok("'\\u0378\\xa0\\u2028\\ufeff\\ue000'"),
            "unassigned, no-break space, line separator, format, private use"
        );
        assert_eq!(render("%(a)r", "it's").as_deref(), Ok("\"it's\""));
        assert_eq!(render("%s", "it's").as_deref(), Ok("{'a': \"it's\"}"));
        assert!(Template::compile("%s", &names).may_hold_whitespace());
        assert!(!Template::compile("%(a)s", &names).may_hold_whitespace());
        assert_eq!(
            Template::compile("<b>", &names).failure(),
            Some((TemplateFailure::Key, "'b'"))
        );
    }
}
