#!/usr/bin/env python3
"""Writes the committed seed corpora in fuzz/seeds/<target>/ from the repository's test data.

Run from fuzz/: python3 make_seeds.py. Seeds are small on purpose: the fuzzer grows its own
corpus in fuzz/corpus/ (not committed).
"""
import base64
import json
import os
import pickle
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# line: knob byte (limit, read size), then a stream of lines.
lines = [
    b"a.b.c 1.5 1700000000\n",
    b"servers.web01.cpu  42 -1\r\n",
    b"x 1e308 1700000000\nbad line\nnan.v nan 1700000000\n",
    b"tagged;k=v;a=b 1 1700000000\nunterminated 1 2",
    "\u6e29\u5ea6.\U0001F525 1 1700000000\n".encode(),
    b"long." + b"x" * 300 + b" 1 1700000000\nshort 1 1\n",
    b"a 0x10 1700000000\nb 1_000 1700000000\nc \xef\xbc\x91 1\n",
]
for i, l in enumerate(lines):
    write("line", f"seed{i}", bytes([0x35]) + l)

# pickle: frame payloads (no length prefix) in every protocol, and hostile shapes.
points = [("a.b", (1700000000, 1.5)), ("c.d", (1700000001, 2))]
for proto in range(0, 6):
    write("pickle", f"proto{proto}", pickle.dumps(points, protocol=proto))
write("pickle", "tuple_of_lists", pickle.dumps((["x.y", [1, 2.0]],), protocol=2))
write("pickle", "bytes_name", pickle.dumps([(b"a.b", (1, 2))], protocol=3))
write("pickle", "memo_shared", b"\x80\x02]q\x00(X\x03\x00\x00\x00a.bq\x01K\x01G@\x04\x00\x00\x00\x00\x00\x00\x86q\x02\x86q\x03h\x01h\x02\x86q\x04e.")
write("pickle", "global_opcode", b"\x80\x02cos\nsystem\nq\x00.")
write("pickle", "deep", b"\x80\x02" + b"]" * 50 + b"e" * 49 + b".")

# kpl: every record of tests/compat/kpl-vectors.json.
with open(os.path.join(REPO, "tests", "compat", "kpl-vectors.json")) as f:
    vectors = json.load(f)
for i, v in enumerate(vectors["vectors"] + vectors["negative"]):
    write("kpl", f"vector{i}", base64.b64decode(v["data_b64"]))

# relay_toml: the annotated example and the harness's configurations.
for name in ["relay.toml.example", "bench/relays/anthracite.toml", "bench/relays/anthracite-spill.toml"]:
    with open(os.path.join(REPO, name), "rb") as f:
        write("relay_toml", os.path.basename(name), f.read())
write("relay_toml", "servers_table", '[destinations]\nservers = ["127.0.0.1:2104:a", { address = "[::1]:2204:b", when_full = "block", max_queue_datapoints = 5000 }]\n[router]\nmethod = "rules"\n[[rules]]\npattern = "^carbon\\\\."\ndestinations = ["127.0.0.1:2104:a"]\n[[rules]]\ndefault = true\ndestinations = ["[::1]:2204:b"]\n')
write("relay_toml", "kinesis", '[destinations]\nservers = ["127.0.0.1:2104:a"]\n[[kinesis]]\nstream = "arn:aws:kinesis:eu-west-1:1:stream/m"\ncheckpoint_dir = "/tmp/k"\ninitial_position = "at_timestamp"\ninitial_timestamp = 2026-01-01T00:00:00Z\n')

# carbon_conf: carbon.conf NUL relay-rules.conf NUL aggregation-rules.conf.
carbon = """[DEFAULT]
base = /opt/graphite
[relay]
LINE_RECEIVER_INTERFACE = 0.0.0.0
LINE_RECEIVER_PORT = 2013
PICKLE_RECEIVER_PORT = 2014
RELAY_METHOD = rules
DESTINATIONS = 127.0.0.1:2104:a, 127.0.0.1:2204:b
MAX_QUEUE_SIZE = 10000
USE_FLOW_CONTROL = True
METRIC_CLIENT_IDLE_TIMEOUT = None
CARBON_METRIC_PREFIX = %(base)s
[relay:b]
REPLICATION_FACTOR = 2
  continued
"""
rules = """[carbon]
pattern = ^carbon\\.
destinations = 127.0.0.1:2104:a
continue = yes

[default]
default = true
destinations = 127.0.0.1:2104:a, 127.0.0.1:2204:b
"""
aggregation = "<env>.applications.<app>.all.requests (60) = sum <env>.applications.<app>.*.requests\n"
write("carbon_conf", "relay", carbon + "\0" + rules + "\0" + aggregation)
write("carbon_conf", "consistent", "[relay]\nRELAY_METHOD = consistent-hashing\nDESTINATIONS = 127.0.0.1:2004\nMAX_RECEIVER_CONNECTIONS = inf\n")


# c_relay_conf: a carbon-c-relay configuration, then NUL-separated lines to route. Seeds are
# carbon-c-relay 3.7.3's own configurations (tests/compat/carbon-c-relay-3.7.3/), each with
# the names of its test case when it has one.
c_relay = os.path.join(REPO, "tests", "compat", "carbon-c-relay-3.7.3")
for sub in ("issues", "test"):
    for name in sorted(os.listdir(os.path.join(c_relay, sub))):
        if not name.endswith(".conf"):
            continue
        with open(os.path.join(c_relay, sub, name), "rb") as f:
            conf = f.read()
        lines = []
        for ext in (".tst", ".dbg"):
            case = os.path.join(c_relay, "test", name[:-5] + ext)
            if os.path.exists(case):
                with open(case, "rb") as f:
                    lines = [l for l in f.read().split(b"\n") if l][:16]
        write("c_relay_conf", name[:-5], conf + b"".join(b"\0" + l for l in lines))


# spill_record: mode byte, then a payload (mode 1 wraps it in a record with a valid CRC).
def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def payload(names):
    out = varint(len(names))
    for i, n in enumerate(names):
        out += varint(len(n)) + n + struct.pack("<d", 1.7e9 + i) + struct.pack("<d", float(i))
    return out


write("spill_record", "one_record", b"\x01" + payload([b"a.b", b"c.d"]))
write("spill_record", "two_records", b"\x01" + payload([b"x"]) + b"\xff" + payload([b"y.z" * 10]))
write("spill_record", "raw_segment", b"\x00" + struct.pack("<IIQ", 10, 0, 0) + b"garbage!!!")


# protobuf: carbon.Payload frame payloads (no length prefix), well formed and hostile.
def pb_field(number, wire, body):
    key = varint(number << 3 | wire)
    if wire == 2:
        return key + varint(len(body)) + body
    return key + body


def pb_point(ts, value):
    return pb_field(1, 0, varint(ts)) + pb_field(2, 1, struct.pack("<d", value))


def pb_metric(name, points):
    return pb_field(1, 2, name) + b"".join(pb_field(2, 2, pb_point(t, v)) for t, v in points)


def pb_payload(metrics):
    return b"".join(pb_field(1, 2, m) for m in metrics)


write("protobuf", "two_metrics", pb_payload([pb_metric(b"a.b", [(1700000000, 1.5)]), pb_metric(b"c.d", [(1700000001, 2.0), (1700000002, -0.0)])]))
write("protobuf", "one_name_many_points", pb_payload([pb_metric(b"amplify." + b"x" * 200, [(1700000000 + i, float(i)) for i in range(200)])]))
write("protobuf", "bad_utf8_name", pb_payload([pb_metric(b"bad\xff", [(1, 1.0)]), pb_metric(b"ok", [(1, 2.0)])]))
write("protobuf", "unknown_fields_and_group", pb_payload([pb_metric(b"u", [(1, 1.0)]) + pb_field(9, 0, varint(5)) + varint(10 << 3 | 3) + varint(10 << 3 | 4)]))
write("protobuf", "truncated", pb_payload([pb_metric(b"t", [(1, 1.0)])])[:-3])
write("protobuf", "forged_name", pb_payload([pb_metric(b"evil.a 1 1700000000\nevil.injected", [(1700000000, 1.0)])]))


# decompress: knob byte (low 2 bits: 0 gzip, 1 lz4, 2 snappy, 3 zstd; high 6: read size - 1),
# then a compressed stream. gzip with Python's zlib (partial flushes, as carbon-c-relay
# writes it); lz4 frames and zstd from their command-line tools; snappy raw blocks by hand.
import gzip as _gzip
import subprocess
import zlib


def knob(kind, read):
    return bytes([kind | ((read - 1) << 2)])


seed_lines = b"".join(b"servers.host%02d.cpu.user %d 1700000000\n" % (i % 7, i) for i in range(60))
deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + 15)
gz = deflate.compress(seed_lines[:700]) + deflate.flush(zlib.Z_PARTIAL_FLUSH)
gz += deflate.compress(seed_lines[700:]) + deflate.flush(zlib.Z_SYNC_FLUSH)
write("decompress", "gzip_partial_flushes", knob(0, 5) + gz)
write("decompress", "gzip_two_members", knob(0, 64) + _gzip.compress(seed_lines[:300]) + _gzip.compress(seed_lines[300:]))


def tool(args, data):
    return subprocess.run(args, input=data, stdout=subprocess.PIPE, check=True).stdout


lz = tool(["lz4", "-c", "-q"], seed_lines[:900]) + tool(["lz4", "-c", "-q", "--content-size"], seed_lines[900:])
write("decompress", "lz4_two_frames", knob(1, 3) + lz)
write("decompress", "lz4_skippable", knob(1, 64) + struct.pack("<II", 0x184D2A50, 3) + b"abc" + lz)
write("decompress", "zstd_stream", knob(3, 9) + tool(["zstd", "-c", "-q", "--no-check"], seed_lines))


def snappy_literal_block(data):
    # The decoded length, then one literal element (length - 1 in 1 or 2 extra bytes).
    n = len(data)
    tag = bytes([60 << 2, n - 1]) if n <= 256 else bytes([61 << 2]) + struct.pack("<H", n - 1)
    return varint(n) + tag + data


# Two literal blocks, then one with copies: "abcd" and a 1-byte-offset copy of 8 from 4 back.
copies = varint(12) + bytes([3 << 2]) + b"abcd" + bytes([1 | ((8 - 4) << 2), 4])
write("decompress", "snappy_blocks", knob(2, 2) + snappy_literal_block(seed_lines[:200]) + snappy_literal_block(seed_lines[200:260]) + copies)
