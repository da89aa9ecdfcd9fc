//! Output templates against carbon 1.1.10's own `AggregationRule` (Python 3.11): thousands of
//! generated templates — `<field>`, `<<field>>`, stray and doubled `%`, keyed and keyless
//! conversions, flags, widths, precisions, `*`, unknown conversion characters, unbalanced
//! brackets — each resolved for names whose fields have one character and several, and for a
//! pattern whose optional group takes no part. For every (rule, name) anthracite must give
//! what `get_aggregate_metric` gives: the same name, `None` from a caught `TypeError` or no
//! match, or the same uncaught exception class.

use anthracite::unstable::router::aggregation::{Resolution, TemplateFailure, parse_rules};
use anthracite_testkit::venv::run_python_json;
use std::time::Duration;

/// Input patterns (their named groups are what templates may name) and names each matches.
const INPUTS: [(&str, &[&str]); 3] = [
    ("in.<a>.<<b>>", &["in.w.x", "in.web.x.y", "in.é.a'b"]),
    ("in.<a>.<b>", &["in.w.x", "in.web1.host"]),
    // `in\.(?P<a>[^.]+?)|x\.(?P<b>[^.]+?)$`: one of the groups takes no part (None).
    ("in.<a>|x.<b>", &["in.web", "x.qq", "x.q"]),
];

/// Pieces a template is made of.
const PIECES: [&str; 32] = [
    "<a>", "<b>", "<<a>>", "<zz>", "<", ">", "%", "%%", "%s", "%r", "%a", "%c", "%d", "%x", "%f",
    "%q", "%(a)s", "%(b)r", "%(a)c", "%(a)-3s", "%(a)5s", "%(a).1s", "%(a)*s", "%(a)ls", "%(a)0",
    "%(", "(", ")", ".", "agg", "x", "%(b)a",
];

fn outcome(r: &Resolution) -> String {
    match r {
        Resolution::NoMatch => "none".into(),
        Resolution::Output(name) => format!("ok:{name}"),
        Resolution::Failed(TemplateFailure::Type) => "none".into(),
        Resolution::Failed(TemplateFailure::Key) => "KeyError".into(),
        Resolution::Failed(TemplateFailure::Value) => "ValueError".into(),
        Resolution::Failed(TemplateFailure::TooWide) => "too wide".into(),
    }
}

const SCRIPT: &str = r#"
import json, sys
from carbon.aggregator.rules import RuleManager
from carbon import log
log.err = lambda *a, **k: None
out = []
for line, names in json.load(sys.stdin):
    rule = RuleManager.parse_definition(line)
    for name in names:
        try:
            r = rule.get_aggregate_metric(name)
            out.append("none" if r is None else "ok:" + r)
        except Exception as e:
            out.append(type(e).__name__)
print(json.dumps(out))
"#;

#[test]
fn output_templates_format_as_carbon_formats_them() {
    // xorshift64: the same templates every run.
    let mut state = 0x7e3a_1a7e_u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut cases: Vec<(String, Vec<String>)> = Vec::new();
    let mut ours = Vec::new();
    for i in 0..3000 {
        let (input, names) = INPUTS[i % INPUTS.len()];
        let len = 1 + next(5);
        let template: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
        let line = format!("{template} (60) = sum {input}");
        let rules = parse_rules(&line).unwrap_or_else(|(_, e)| {
            panic!("carbon starts on {line:?}; anthracite refused it: {e}")
        });
        for name in names {
            ours.push(outcome(&rules[0].resolve(name)));
        }
        cases.push((line, names.iter().map(|n| n.to_string()).collect()));
    }
    let theirs: Vec<String> = run_python_json(
        "carbon's AggregationRule",
        SCRIPT,
        &serde_json::json!(cases),
        Duration::from_secs(120),
    );
    assert_eq!(theirs.len(), ours.len());
    let mut kinds = std::collections::BTreeMap::new();
    let mut mismatches = Vec::new();
    let flat = cases
        .iter()
        .flat_map(|(line, names)| names.iter().map(move |n| (line, n)));
    for (((line, name), t), o) in flat.zip(&theirs).zip(&ours) {
        *kinds
            .entry(t.split(':').next().unwrap_or_default().to_owned())
            .or_insert(0) += 1;
        if t != o {
            mismatches.push(format!(
                "{line:?} on {name:?}: carbon {t:?}, anthracite {o:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        ours.len(),
        mismatches[..mismatches.len().min(30)].join("\n")
    );
    // The generated templates reach every outcome carbon has.
    for kind in ["ok", "none", "KeyError", "ValueError"] {
        assert!(
            kinds.get(kind).copied().unwrap_or(0) > 100,
            "too few {kind}: {kinds:?}"
        );
    }
}
