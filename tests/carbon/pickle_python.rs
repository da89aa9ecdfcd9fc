//! The pickle decoder and encoder against the real Python 3.11 `pickle` module.
//!
//! Each test runs `python3.11` (stdlib only) to produce pickles for protocols 0–5 together with
//! what carbon 1.1.10 would make of them (`metric, (timestamp, value) = item`,
//! `float(timestamp), float(value)`, bytes names decoded as UTF-8), and checks the decoder
//! yields exactly those datapoints, bit for bit. A missing `python3.11` fails the tests.

use std::io::Write;
use std::process::{Command, Stdio};

use anthracite::unstable::batch::Datapoint;
use anthracite::unstable::protocol::pickle::{PickleDecoder, encode_message};
use anthracite::{DropCounts, DropReason};
use bytes::BytesMut;
use serde_json::Value;

const PYTHON: &str = "python3.11";

/// Shared Python prelude: the datasets and carbon's per-entry rules.
const PRELUDE: &str = r#"
import json, pickle, pickletools, struct, sys

T = 1700000000

def bits(x):
    return struct.pack('>d', x).hex()

def carbon_expect(obj):
    pts, bad_entry, bad_utf8 = [], 0, 0
    for item in obj:
        try:
            metric, (ts, v) = item
            ts, v = float(ts), float(v)
        except Exception:
            bad_entry += 1
            continue
        if isinstance(metric, (bytes, bytearray)):
            try:
                metric = metric.decode('utf-8')
            except UnicodeDecodeError:
                bad_utf8 += 1
                continue
        elif not isinstance(metric, str):
            bad_entry += 1
            continue
        pts.append([metric.encode('utf-8').hex(), bits(ts), bits(v)])
    return pts, bad_entry, bad_utf8

def case(label, proto, payload, obj):
    pts, bad_entry, bad_utf8 = carbon_expect(obj)
    ops = set()
    try:  # pickletools cannot show non-ASCII protocol-0 STRINGs; keep the ops seen so far
        for op, _, _ in pickletools.genops(payload):
            ops.add(op.name)
    except UnicodeDecodeError:
        ops.add('?')
    ops = sorted(ops)
    print(json.dumps({'label': label, 'proto': proto, 'payload': payload.hex(), 'points': pts,
                      'bad_entry': bad_entry, 'bad_utf8': bad_utf8, 'ops': ops}))

def datasets(proto):
    d = {}
    d['list_of_tuples'] = [('a.b.c', (T, 1.5)), ('x', (T + 60, 42))]
    d['tuple_payload'] = (('a.b', (T, 1)), ('c.d', (T, -2.25)))
    d['inner_lists'] = [['a.b', [T, 1.0]], ('c', [T, 2]), ['d', (T, 3)]]
    d['numbers'] = [
        ('i', (T, 0)), ('i', (T, -1)), ('i', (T, 255)), ('i', (T, 256)), ('i', (T, 65535)),
        ('i', (T, 65536)), ('i', (T, 2**31 - 1)), ('i', (T, -2**31)), ('i', (T, 2**31)),
        ('i', (T, 2**63 - 1)), ('i', (T, -2**63)), ('i', (T, 2**64 + 1)),
        ('i', (T, -(2**70) - 12345)), ('i', (T, 10**30)), ('i', (T, 2**53 + 1)),
        ('i', (T, 2**54 + 3)), ('i', (T, -(10**300))), ('i', (T, 2**1023 * 2 - 2**970)),
        ('b', (T, True)), ('b', (False, 1)), ('f', (T + 0.5, 1e-300)), ('f', (T, 5e-324)),
        ('f', (T, float('inf'))), ('f', (T, float('-inf'))), ('f', (T, -0.0)),
        ('f', (T, float('nan'))), ('f', (float(T), 0.1)), ('f', (-1, 1.7976931348623157e308)),
    ]
    d['numeric_strings'] = [
        ('s', ('1700000000', '1.5')), ('s', (T, ' 2 ')), ('s', (T, '1_000')),
        ('s', (T, '-inf')), ('s', (T, '1e5')), ('s', (T, '.5')), ('s', (T, '+7.')),
        ('s', (T, '\u3000 3\x1c')), ('s', (T, 'NaN')), ('s', (T, '0.1')),
    ]
    d['names'] = [
        ('plain.name', (T, 1)), ('温度.服务器.cpu', (T, 2)), ('emoji.🔥.🚀', (T, 3)),
        ('météo.ñ', (T, 4)), ('a.b;k=v;tag2=v2', (T, 5)), ('back\\slash\nnew\rline\x1a', (T, 6)),
        ('quote\'"', (T, 7)), ('\\u1234 not an escape', (T, 8)), ('nul\x00', (T, 9)),
    ]
    d['bad_entries'] = [
        ('ok', (T, 1)), ('short', (T,)), ('long', (T, 1, 2)), (1, (T, 2)), ('none', (None, 1)),
        ('str', ('abc', 1)), ('overflow', (T, 2**1024)), ('neg_overflow', (T, -(2**1100))),
        ('dict', {'a': 1}), 'scalar', ('nested', ((T, 1), 2)), ('ok2', [T, 2]), None, 7,
        ('bad_num', (T, '1__0')), ('bad_num2', (T, '0x10')), {'k': 'v'}, ('ok3', (T, 3)),
        [('x', (T, 1))], ('list_val', (T, [1])),
    ]
    shared_pt = (T, 1.0)
    name = 'shared.name'
    item = (name, (T, 9.0))
    d['memo_shared'] = [(name, shared_pt), (name, shared_pt), (name, (T, 2.0)),
                        ('other', shared_pt), item, item, item]
    d['large_batched'] = [('metric.%d' % (i % 37), (T + i, i * 0.25)) for i in range(2500)]
    d['empty'] = []
    if proto >= 3:
        d['bytes'] = [
            (b'bytes.name', (T, 1)), ('é.x'.encode(), (T, 2)), (b'\xff\xfe', (T, 3)),
            ('s', (b'2', b' 2.5\t')), ('s', (T, b'1_5')), ('s', (T, b'\x1c1')),
        ]
    if proto >= 4:
        # Two-element sets would unpack in Python (in hash order); we refuse non-sequences.
        d['sets'] = [('set', {1, 2, 3}), ('fs', frozenset([T, 1, 2])), ('ok', (T, 1)),
                     ('inner_set', (T, {1}))]
    if proto >= 5:
        d['bytearray'] = [(bytearray(b'ba.name'), (T, bytearray(b'4'))), ('ok', (T, 1))]
    return d
"#;

fn python(script: &str, stdin: &[u8]) -> String {
    let child = Command::new(PYTHON)
        .arg("-c")
        .arg(format!("{PRELUDE}\n{script}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => panic!(
            "{PYTHON} is required by this test (the real Python pickle module is the \
             reference) but could not be started: {e}. Install Python 3.11 and put \
             `{PYTHON}` on PATH."
        ),
    };
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).expect("write to python stdin");
    }
    let out = child.wait_with_output().expect("wait for python");
    assert!(
        out.status.success(),
        "{PYTHON} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("python output is UTF-8")
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

struct Case {
    label: String,
    proto: u64,
    payload: Vec<u8>,
    points: Vec<(String, String, String)>,
    bad_entry: u64,
    bad_utf8: u64,
    ops: Vec<String>,
}

fn cases(script: &str) -> Vec<Case> {
    python(script, b"")
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("json case");
            let s = |k: &str| v[k].as_str().expect(k).to_owned();
            Case {
                label: s("label"),
                proto: v["proto"].as_u64().expect("proto"),
                payload: unhex(&s("payload")),
                points: v["points"]
                    .as_array()
                    .expect("points")
                    .iter()
                    .map(|p| {
                        let f = |i: usize| p[i].as_str().expect("point field").to_owned();
                        (f(0), f(1), f(2))
                    })
                    .collect(),
                bad_entry: v["bad_entry"].as_u64().expect("bad_entry"),
                bad_utf8: v["bad_utf8"].as_u64().expect("bad_utf8"),
                ops: v["ops"]
                    .as_array()
                    .expect("ops")
                    .iter()
                    .map(|o| o.as_str().expect("op").to_owned())
                    .collect(),
            }
        })
        .collect()
}

/// Decodes every case and returns a description of each mismatch.
fn check(cases: &[Case]) -> Vec<String> {
    let mut decoder = PickleDecoder::new();
    let mut failures = Vec::new();
    for c in cases {
        let mut drops = DropCounts::default();
        let mut got = Vec::new();
        let result = decoder.decode(&c.payload, &mut drops, |name, ts, v| {
            got.push((hex(name), hex(&ts.to_be_bytes()), hex(&v.to_be_bytes())));
        });
        let what = format!("{} (protocol {}, ops {:?})", c.label, c.proto, c.ops);
        match result {
            Err(e) => failures.push(format!("{what}: decode failed with {e:?}")),
            Ok(n) if n != got.len() => failures.push(format!("{what}: returned {n}")),
            Ok(_) => {
                if got != c.points {
                    failures.push(format!("{what}: got {got:?}\nwant {:?}", c.points));
                }
                let counts = (
                    drops.get(DropReason::BadPickleEntry),
                    drops.get(DropReason::BadUtf8),
                );
                if counts != (c.bad_entry, c.bad_utf8) || drops.total() != counts.0 + counts.1 {
                    failures.push(format!(
                        "{what}: drops {drops:?}, want bad_entry {} bad_utf8 {}",
                        c.bad_entry, c.bad_utf8
                    ));
                }
            }
        }
    }
    failures
}

#[test]
fn python_pickles_of_every_protocol_decode_to_carbons_datapoints() {
    let cases = cases(
        "for proto in range(6):\n    for label, obj in datasets(proto).items():\n        \
         case(label, proto, pickle.dumps(obj, protocol=proto), obj)\n",
    );
    assert_eq!(cases.iter().map(|c| c.proto).max(), Some(5));
    assert!(cases.len() >= 6 * 10, "only {} cases", cases.len());
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn memoized_repeated_objects_decode_through_get_and_memoize() {
    let cases = cases(
        "for proto in range(6):\n    obj = datasets(proto)['memo_shared']\n    \
         case('memo_shared', proto, pickle.dumps(obj, protocol=proto), obj)\n",
    );
    for c in &cases {
        assert!(
            c.ops.iter().any(|o| o.ends_with("GET")),
            "protocol {} pickle uses no memo GET: {:?}",
            c.proto,
            c.ops
        );
        if c.proto >= 4 {
            assert!(c.ops.iter().any(|o| o == "MEMOIZE"), "{:?}", c.ops);
        }
        assert_eq!(c.points.len(), 7);
    }
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn large_frames_use_batched_appends_and_frames() {
    let cases = cases(
        "for proto in range(6):\n    obj = datasets(proto)['large_batched']\n    \
         case('large_batched', proto, pickle.dumps(obj, protocol=proto), obj)\n",
    );
    for c in &cases {
        assert_eq!(c.points.len(), 2500);
        if c.proto >= 4 {
            assert!(c.ops.iter().any(|o| o == "FRAME"), "{:?}", c.ops);
        }
    }
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Python 2 senders (carbon's own relays and most clients of that era) pickle `str` names as
/// `STRING`/`SHORT_BINSTRING`/`BINSTRING`; this pickler writes bytes exactly as Python 2's did.
const PY2_PICKLER: &str = r#"
class Py2Pickler(pickle._Pickler):
    dispatch = pickle._Pickler.dispatch.copy()
    def save_py2_str(self, obj):
        if self.bin:
            n = len(obj)
            if n < 256:
                self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj)
            else:
                self.write(pickle.BINSTRING + struct.pack('<i', n) + obj)
        else:
            self.write(pickle.STRING + repr(obj)[1:].encode('ascii') + b'\n')
        self.memoize(obj)
    dispatch[bytes] = save_py2_str

import io
def py2_dumps(obj, proto):
    f = io.BytesIO()
    Py2Pickler(f, protocol=proto).dump(obj)
    return f.getvalue()

name = b'servers.web01.cpu'
obj = [(b'a.b', (T, 1.5)), (name, (T, b'2')), (name, (b'1700000060', b' 3.25')),
       (b'latin\xe9', (T, 3)), ('unicode.名', (T, 4)), (b"esc\\aped\t\n'\"\x00\x7f", (T, 5)),
       (b'x' * 300, (T, 6)), (b'tag;k=v', [T, 2**40]), (b'neg', (-1, -7))]
for proto in (0, 1, 2):
    case('python2_style', proto, py2_dumps(obj, proto), obj)
"#;

#[test]
fn python2_style_str_pickles_decode() {
    let cases = cases(PY2_PICKLER);
    assert_eq!(cases.len(), 3);
    assert!(
        cases[0].ops.iter().any(|o| o == "STRING"),
        "{:?}",
        cases[0].ops
    );
    assert!(
        cases[2].ops.iter().any(|o| o == "SHORT_BINSTRING"),
        "{:?}",
        cases[2].ops
    );
    assert!(
        cases[2].ops.iter().any(|o| o == "BINSTRING"),
        "{:?}",
        cases[2].ops
    );
    let failures = check(&cases);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Python 3 pickles `bytes` below protocol 3 as `_codecs.encode(...)` via GLOBAL + REDUCE.
/// carbon's SafeUnpickler refuses that global, and so do we: the whole frame is dropped.
#[test]
fn python3_protocol2_bytes_need_reduce_and_are_rejected_like_carbon() {
    let script = "for proto in (0, 1, 2):\n    obj = [(b'a.b', (T, 1.0))]\n    \
                  case('py3_bytes', proto, pickle.dumps(obj, protocol=proto), obj)\n";
    for c in cases(script) {
        assert!(c.ops.iter().any(|o| o == "REDUCE"), "{:?}", c.ops);
        let result =
            PickleDecoder::new().decode(&c.payload, &mut DropCounts::default(), |_, _, _| {});
        assert_eq!(result, Err(DropReason::BadPickle), "protocol {}", c.proto);
    }
}

#[test]
fn encode_message_is_unpickled_by_python_to_exactly_the_points() {
    let names: [&str; 6] = [
        "a.b.c",
        "温度.服务器",
        "emoji.🔥",
        "a.b;k=v",
        "quote'\"back\\slash",
        "",
    ];
    let numbers: [f64; 12] = [
        1700000000.0,
        0.1,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        1e16,
        1.5e-5,
        -1.0,
        123456.789,
    ];
    let mut points = Vec::new();
    for (i, name) in names.iter().enumerate() {
        for (j, &ts) in numbers.iter().enumerate() {
            points.push((name.as_bytes(), ts, numbers[(i + j * 5) % numbers.len()]));
        }
    }
    let mut out = BytesMut::new();
    encode_message(
        points.iter().map(|&(name, timestamp, value)| Datapoint {
            name,
            timestamp,
            value,
        }),
        &mut out,
    );
    let script = r#"
data = sys.stdin.buffer.read()
n = struct.unpack('>I', data[:4])[0]
assert n == len(data) - 4, (n, len(data))
obj = pickle.loads(data[4:])
assert type(obj) is list, type(obj)
for item in obj:
    assert type(item) is tuple and len(item) == 2, item
    assert type(item[0]) is str and type(item[1]) is tuple and len(item[1]) == 2, item
    assert all(type(x) is float for x in item[1]), item
ops = [op.name for op, _, _ in pickletools.genops(data[4:])]
print(json.dumps({'proto': ops[0], 'points': [[m.encode('utf-8').hex(), bits(t), bits(v)]
                                              for m, (t, v) in obj],
                  'reprs': [[m, repr(t), repr(v)] for m, (t, v) in obj[:3]]}))
"#;
    let reply: Value = serde_json::from_str(&python(script, &out)).expect("json reply");
    assert_eq!(reply["proto"], "PROTO");
    let got: Vec<Vec<String>> = serde_json::from_value(reply["points"].clone()).expect("points");
    let want: Vec<Vec<String>> = points
        .iter()
        .map(|&(name, ts, v)| vec![hex(name), hex(&ts.to_be_bytes()), hex(&v.to_be_bytes())])
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        reply["reprs"][0],
        serde_json::json!(["a.b.c", "1700000000.0", "1700000000.0"])
    );
    assert_eq!(
        reply["reprs"][1],
        serde_json::json!(["a.b.c", "0.1", "1.7976931348623157e+308"])
    );
}

/// carbon 1.1.10's line client (`CarbonLineClientProtocol._sendDatapointsNow`) writes
/// `("%.10f" % value).rstrip('0').rstrip('.')` and `"%d" % timestamp`; anthracite's encoder
/// wrote Python's repr for both, so values past ten decimals and fractional timestamps reached
/// a carbon-cache as other numbers than carbon-relay sends.
#[test]
fn line_encoder_writes_what_carbons_line_client_writes() {
    let script = r#"
import random
random.seed(7)
vals = [random.uniform(-1e6, 1e6) for _ in range(300)] + [random.random() * 10 ** random.randint(-330, 308) for _ in range(300)]
vals += [-random.random() * 10 ** random.randint(-20, 25) for _ in range(300)] + [random.uniform(-1e-9, 1e-9) for _ in range(100)]
vals += [float(random.randint(-10**17, 10**17)) for _ in range(300)] + [float(random.randint(-2**54, 2**54)) for _ in range(300)]
vals += [1700000000 + random.random() for i in range(50)] + [2.0**53 + 2, 2.0**54 - 2, 9999999999999998.0, -9999999999999998.0, 1e16 - 2]
vals += [0.0, -0.0, 1e16, 1e15, 1e-4, 9.999e-5, 1.5e-5, 1e22, 1e23, 1/3, float(2**63), -float(2**63), 5e-324, 0.5, -0.5, 1.5, 2.5, 1e308]
vals += [k / 2**35 for k in range(-20, 20)] + [0.00000000005, 0.00000000015, 0.00000000025, 1.00000000005]
for v in vals:
    print(bits(v), ("%.10f" % v).rstrip('0').rstrip('.'), "%d" % v)
for v in [float('inf'), -float('inf')]:
    print(bits(v), ("%.10f" % v).rstrip('0').rstrip('.'), "-")
"#;
    let mut failures = Vec::new();
    let mut checked = 0;
    for line in python(script, b"").lines() {
        let mut fields = line.split(' ');
        let (Some(bits), Some(value), Some(timestamp)) =
            (fields.next(), fields.next(), fields.next())
        else {
            panic!("python printed {line:?}");
        };
        let v = f64::from_bits(u64::from_str_radix(bits, 16).expect("bits"));
        // Infinite timestamps never reach the encoder (`normalize` drops them; `%d` raises).
        let (ts, want_ts) = match timestamp {
            "-" => (0.0, "0"),
            t => (v, t),
        };
        let mut out = BytesMut::new();
        anthracite::unstable::protocol::line::encode_line(
            Datapoint {
                name: b"m",
                timestamp: ts,
                value: v,
            },
            &mut out,
        );
        let got = std::str::from_utf8(&out).expect("utf8");
        if got != format!("m {value} {want_ts}\n") {
            failures.push(format!(
                "{v:e}: got {got:?}, carbon writes {value} {want_ts}"
            ));
        }
        checked += 1;
    }
    assert!(checked >= 1_700, "python printed only {checked} cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `parse_line` against carbon's `line.decode('utf-8').strip().split()` and `float()`, on
/// random lines built from the characters that matter (Unicode whitespace, `_`, signs,
/// exponents, `inf`/`nan`, invalid UTF-8). Python also accepts non-ASCII decimal digits in
/// `float()`; those are left out (anthracite refuses them).
#[test]
fn parse_line_agrees_with_python_on_random_lines() {
    let script = r#"
import random
random.seed(11)
atoms = ['1', '0', '7', '.', '.', 'e', 'E', '_', '-', '+', 'inf', 'nan', 'Infinity', ' ', ' ',
         '\t', '\x0b', '\x0c', '\r', '\x1c', '\x1f', '\x85', '\xa0', '\u3000', '\u2028', '\u200b',
         '\ufeff', 'a', 'x', ';', '=', 'é', '温', '🔥', '1700000000', '1.5', '-1']
lines = []
for _ in range(4000):
    s = ''.join(random.choice(atoms) for _ in range(random.randint(0, 14)))
    b = s.encode('utf-8')
    if random.random() < 0.03:
        b = b[:random.randint(0, len(b))] + b'\xff' + b
    lines.append(b)
ws = [' ', '\t', '\x0b', '\x0c', '\r', '\x1c', '\x1d', '\x1e', '\x1f', '\x85', '\xa0', '\u1680',
      '\u2000', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '  ']
num = ['1', '0', '9', '3', '4', '5', '6', '7', '8', '.', '_', 'e', 'E', '-', '+', '12', '1_0', '.5', 'inf', 'NaN', 'iNfInItY']
name = ['a', '.', 'b', ';', '=', 'é', '温', '🔥', '\u200b', '\ufeff', '_']
def pick(alphabet, lo, hi):
    return ''.join(random.choice(alphabet) for _ in range(random.randint(lo, hi)))
for _ in range(3000):
    fields = [pick(name, 1, 6), pick(num, 1, 4), pick(num, 1, 4)]
    lines.append((pick(ws, 0, 1) + pick(ws, 1, 2).join(fields) + pick(ws, 0, 2)).encode('utf-8'))
lines += [b'a.b 1 2', b'a.b 1_0 2_0', b'a 1__0 2', b'a 1e5 -1e-5', b'a .5 5.', b'a nan -inf',
          b' a\t1\r', b'a 0x10 1', b'a 1 2 3', b'']
for b in lines:
    try:
        s = b.decode('utf-8')
    except UnicodeDecodeError:
        print(b.hex(), 'utf8'); continue
    f = s.strip().split()
    if len(f) != 3:
        print(b.hex(), 'fields'); continue
    try:
        ts = float(f[2])
    except ValueError:
        print(b.hex(), 'timestamp'); continue
    try:
        v = float(f[1])
    except ValueError:
        print(b.hex(), 'value'); continue
    print(b.hex(), 'ok', f[0].encode('utf-8').hex(), bits(ts), bits(v))
"#;
    let mut failures = Vec::new();
    let mut oks = 0;
    for line in python(script, b"").lines() {
        let mut parts = line.split(' ');
        let input = unhex(parts.next().expect("hex"));
        let want: Vec<&str> = parts.collect();
        let got = match anthracite::unstable::protocol::line::parse_line(&input) {
            Ok((name, ts, v)) => {
                oks += 1;
                format!(
                    "ok {} {} {}",
                    hex(name),
                    hex(&ts.to_be_bytes()),
                    hex(&v.to_be_bytes())
                )
            }
            Err(DropReason::BadUtf8) => "utf8".into(),
            Err(DropReason::BadFields) => "fields".into(),
            Err(DropReason::BadTimestamp) => "timestamp".into(),
            Err(DropReason::BadValue) => "value".into(),
            Err(e) => format!("{e:?}"),
        };
        if got != want.join(" ") {
            failures.push(format!(
                "{:?}: got {got}, python {want:?}",
                String::from_utf8_lossy(&input)
            ));
        }
    }
    assert!(oks > 400, "too few valid lines generated: {oks}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
