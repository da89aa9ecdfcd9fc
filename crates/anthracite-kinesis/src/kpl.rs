//! KPL aggregation: one Kinesis record ↔ its user records.
//!
//! The Kinesis Producer Library packs many user records into one Kinesis record:
//! `F3 89 9A C2` ‖ protobuf `AggregatedRecord` ‖ MD5(protobuf). Every user record shares the
//! outer sequence number and gets a sub-sequence number: its index in `records` (0, 1, 2…).
//! Like the Kinesis Client Library, a record without the magic, too short to hold magic and
//! digest, with a wrong MD5, or whose protobuf does not decode (or points outside its key
//! tables) is *not* aggregated: it passes through as one plain user record with
//! sub-sequence 0. No hash-range filtering is done (the KCL does it only after a reshard with
//! leases; one relay reading every shard needs none).
//!
//! Payloads are [`Bytes`] slices of the outer record: nothing is copied.
//!
//! [`AggregateBuilder`] is the other direction, for the Kinesis destination: it writes the protobuf
//! by hand, field by field in number order as the KPL and `aws-kinesis-agg` do (so it
//! reproduces their bytes), de-duplicating partition and explicit hash keys, and allocates
//! nothing per user record once its buffers are warm.

use std::collections::HashMap;

use bytes::{BufMut, Bytes};
use md5::{Digest, Md5};
use prost::encoding::{encode_varint, encoded_len_varint};

/// The four bytes that open an aggregated record.
pub(crate) const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
const DIGEST_LEN: usize = 16;

/// `aws.kinesis.protobuf.AggregatedRecord` (proto2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AggregatedRecord {
    /// Partition keys, referenced by index.
    #[prost(string, repeated, tag = "1")]
    pub partition_key_table: Vec<String>,
    /// Explicit hash keys, referenced by index.
    #[prost(string, repeated, tag = "2")]
    pub explicit_hash_key_table: Vec<String>,
    /// The user records.
    #[prost(message, repeated, tag = "3")]
    pub records: Vec<Record>,
}

/// `aws.kinesis.protobuf.Record`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Record {
    /// Index into `partition_key_table`.
    #[prost(uint64, required, tag = "1")]
    pub partition_key_index: u64,
    /// Index into `explicit_hash_key_table`; presence matters (proto2 `optional`).
    #[prost(uint64, optional, tag = "2")]
    pub explicit_hash_key_index: Option<u64>,
    /// The payload.
    #[prost(bytes = "bytes", required, tag = "3")]
    pub data: Bytes,
    /// Tags (unused by the relay, decoded for completeness).
    #[prost(message, repeated, tag = "4")]
    pub tags: Vec<Tag>,
}

/// `aws.kinesis.protobuf.Tag`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Tag {
    /// Key.
    #[prost(string, required, tag = "1")]
    pub key: String,
    /// Value.
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// What a Kinesis record turned out to be.
#[derive(Clone, Debug, PartialEq)]
pub enum Deaggregated {
    /// No magic: a plain record (sub-sequence 0).
    Plain(Bytes),
    /// Magic present but not a valid aggregate (too short, bad MD5, bad protobuf or key
    /// index): passed through as one plain record, and counted as corrupt.
    Corrupt(Bytes, Corruption),
    /// A valid aggregate; user record `i` has sub-sequence number `i`.
    Aggregated(AggregatedRecord),
}

/// Why a record with the magic prefix was not treated as an aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Not longer than magic + digest.
    TooShort,
    /// The digest does not match the protobuf.
    BadDigest,
    /// The protobuf does not decode.
    BadProtobuf,
    /// A key index points outside its table.
    BadKeyIndex,
}

/// Splits one Kinesis record into user records (see the module docs).
pub fn deaggregate(data: &Bytes) -> Deaggregated {
    if !data.starts_with(&MAGIC) {
        return Deaggregated::Plain(data.clone());
    }
    let corrupt = |why| Deaggregated::Corrupt(data.clone(), why);
    if data.len() <= MAGIC.len() + DIGEST_LEN {
        return corrupt(Corruption::TooShort);
    }
    let body_end = data.len() - DIGEST_LEN;
    let body = data.slice(MAGIC.len()..body_end);
    if Md5::digest(&body).as_slice() != &data[body_end..] {
        return corrupt(Corruption::BadDigest);
    }
    let agg = match <AggregatedRecord as prost::Message>::decode(body) {
        Ok(a) => a,
        Err(_) => return corrupt(Corruption::BadProtobuf),
    };
    let pks = agg.partition_key_table.len() as u64;
    let ehks = agg.explicit_hash_key_table.len() as u64;
    let indices_ok = agg
        .records
        .iter()
        .all(|r| r.partition_key_index < pks && r.explicit_hash_key_index.is_none_or(|i| i < ehks));
    if !indices_ok {
        return corrupt(Corruption::BadKeyIndex);
    }
    Deaggregated::Aggregated(agg)
}

impl AggregatedRecord {
    /// Partition key of user record `r` (indices were checked by [`deaggregate`]).
    pub fn partition_key(&self, r: &Record) -> &str {
        usize::try_from(r.partition_key_index)
            .ok()
            .and_then(|i| self.partition_key_table.get(i))
            .map_or("", String::as_str)
    }

    /// Explicit hash key of user record `r`, present only when the record set its index.
    pub fn explicit_hash_key(&self, r: &Record) -> Option<&str> {
        let i = usize::try_from(r.explicit_hash_key_index?).ok()?;
        self.explicit_hash_key_table.get(i).map(String::as_str)
    }
}

/// Builds an aggregated record (the inverse of [`deaggregate`]), for tests and tools.
pub fn aggregate(agg: &AggregatedRecord) -> Vec<u8> {
    let body = prost::Message::encode_to_vec(agg);
    let mut out = Vec::with_capacity(MAGIC.len() + body.len() + DIGEST_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&body);
    out.extend_from_slice(&Md5::digest(&body));
    out
}

/// The largest Kinesis record (data plus partition key), in bytes.
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 20;

/// One key table of an aggregate (`partition_key_table` or `explicit_hash_key_table`): the
/// encoded entries, and an index from a key's hash to its position for de-duplication.
#[derive(Debug, Default)]
struct KeyTable {
    /// Protobuf field `tag`: every entry, encoded.
    encoded: Vec<u8>,
    /// Per entry: where its text sits in `encoded`.
    spans: Vec<(usize, usize)>,
    /// Key hash → entry index. A hash collision with different text adds a second entry
    /// (still a valid aggregate, just not de-duplicated).
    index: HashMap<u64, u64>,
}

impl KeyTable {
    /// The index of `key`, adding it when new.
    fn index_of(&mut self, tag: u8, key: &[u8]) -> u64 {
        let h = xxhash_rust::xxh3::xxh3_64(key);
        if let Some(&i) = self.index.get(&h)
            && let Some(&(from, len)) = usize::try_from(i).ok().and_then(|i| self.spans.get(i))
            && self.encoded.get(from..from + len) == Some(key)
        {
            return i;
        }
        let i = self.spans.len() as u64;
        self.encoded.push(tag);
        encode_varint(key.len() as u64, &mut self.encoded);
        self.spans.push((self.encoded.len(), key.len()));
        self.encoded.extend_from_slice(key);
        self.index.entry(h).or_insert(i);
        i
    }

    /// Bytes a new entry for a key of `len` bytes would add.
    fn entry_len(len: usize) -> usize {
        1 + encoded_len_varint(len as u64) + len
    }

    fn clear(&mut self) {
        self.encoded.clear();
        self.spans.clear();
        self.index.clear();
    }
}

/// Builds one aggregated record from user records (the inverse of [`deaggregate`]).
///
/// Push user records, check [`encoded_len`](Self::encoded_len) against the size wanted, then
/// [`finish`](Self::finish) into the output buffer; the aggregator is empty again afterwards
/// and keeps its buffers.
#[derive(Debug, Default)]
pub struct AggregateBuilder {
    keys: KeyTable,
    hash_keys: KeyTable,
    records: Vec<u8>,
    count: usize,
    /// The first user record's partition key: the outer record's, so Kinesis routes the
    /// aggregate where it routes that record.
    first_key: Vec<u8>,
}

/// Protobuf tags: field number << 3 | wire type 2 (length-delimited) or 0 (varint).
const TAG_PARTITION_KEY_TABLE: u8 = 1 << 3 | 2;
const TAG_EXPLICIT_HASH_KEY_TABLE: u8 = 2 << 3 | 2;
const TAG_RECORDS: u8 = 3 << 3 | 2;
const TAG_RECORD_PARTITION_KEY_INDEX: u8 = 1 << 3;
const TAG_RECORD_EXPLICIT_HASH_KEY_INDEX: u8 = 2 << 3;
const TAG_RECORD_DATA: u8 = 3 << 3 | 2;

impl AggregateBuilder {
    /// An empty aggregator.
    pub fn new() -> Self {
        Self::default()
    }

    /// User records pushed since the last [`finish`](Self::finish).
    pub fn len(&self) -> usize {
        self.count
    }

    /// No user record pushed yet.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The partition key of the first user record (the outer record's partition key).
    pub fn first_partition_key(&self) -> &[u8] {
        &self.first_key
    }

    /// The size of the finished record: magic, protobuf and digest.
    pub fn encoded_len(&self) -> usize {
        MAGIC.len()
            + self.keys.encoded.len()
            + self.hash_keys.encoded.len()
            + self.records.len()
            + DIGEST_LEN
    }

    /// At most the bytes [`push`](Self::push) would add for a record of `data_len` bytes
    /// under a new partition key of `key_len` bytes (no explicit hash key).
    pub fn push_len(key_len: usize, data_len: usize) -> usize {
        let inner = 1 + 10 + 1 + encoded_len_varint(data_len as u64) + data_len;
        KeyTable::entry_len(key_len) + 1 + encoded_len_varint(inner as u64) + inner
    }

    /// Adds a user record. `partition_key` must be UTF-8 (a protobuf `string`).
    pub fn push(&mut self, partition_key: &str, explicit_hash_key: Option<&str>, data: &[u8]) {
        self.push_bytes(
            partition_key.as_bytes(),
            explicit_hash_key.map(str::as_bytes),
            data,
        );
    }

    /// [`push`](Self::push) for keys the caller has checked are UTF-8.
    pub(crate) fn push_bytes(
        &mut self,
        partition_key: &[u8],
        explicit_hash_key: Option<&[u8]>,
        data: &[u8],
    ) {
        if self.count == 0 {
            self.first_key.clear();
            self.first_key.extend_from_slice(partition_key);
        }
        let pk = self.keys.index_of(TAG_PARTITION_KEY_TABLE, partition_key);
        let ehk =
            explicit_hash_key.map(|k| self.hash_keys.index_of(TAG_EXPLICIT_HASH_KEY_TABLE, k));
        let inner = 1
            + encoded_len_varint(pk)
            + ehk.map_or(0, |i| 1 + encoded_len_varint(i))
            + 1
            + encoded_len_varint(data.len() as u64)
            + data.len();
        let r = &mut self.records;
        r.push(TAG_RECORDS);
        encode_varint(inner as u64, r);
        r.push(TAG_RECORD_PARTITION_KEY_INDEX);
        encode_varint(pk, r);
        if let Some(i) = ehk {
            r.push(TAG_RECORD_EXPLICIT_HASH_KEY_INDEX);
            encode_varint(i, r);
        }
        r.push(TAG_RECORD_DATA);
        encode_varint(data.len() as u64, r);
        r.extend_from_slice(data);
        self.count += 1;
    }

    /// Appends the aggregated record to `out` and empties the aggregator.
    pub fn finish(&mut self, out: &mut impl BufMut) {
        let mut digest = Md5::new();
        out.put_slice(&MAGIC);
        for part in [&self.keys.encoded, &self.hash_keys.encoded, &self.records] {
            out.put_slice(part);
            digest.update(part);
        }
        out.put_slice(&digest.finalize());
        self.keys.clear();
        self.hash_keys.clear();
        self.records.clear();
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(n: usize) -> AggregatedRecord {
        AggregatedRecord {
            partition_key_table: vec!["a".into()],
            explicit_hash_key_table: vec![],
            records: (0..n)
                .map(|i| Record {
                    partition_key_index: 0,
                    explicit_hash_key_index: None,
                    data: Bytes::from(format!("m.{i} 1 1\n")),
                    tags: vec![],
                })
                .collect(),
        }
    }

    #[test]
    fn roundtrip_and_corruptions() {
        let bytes = Bytes::from(aggregate(&agg(3)));
        match deaggregate(&bytes) {
            Deaggregated::Aggregated(a) => assert_eq!(a.records.len(), 3),
            other => panic!("{other:?}"),
        }
        let mut bad = bytes.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            deaggregate(&Bytes::from(bad)),
            Deaggregated::Corrupt(_, Corruption::BadDigest)
        ));
        let mut bad_index = agg(1);
        bad_index.records[0].partition_key_index = 5;
        assert!(matches!(
            deaggregate(&Bytes::from(aggregate(&bad_index))),
            Deaggregated::Corrupt(_, Corruption::BadKeyIndex)
        ));
        let mut garbage = MAGIC.to_vec();
        garbage.extend_from_slice(&[0xff; 8]);
        let digest = Md5::digest(&garbage[4..]);
        garbage.extend_from_slice(&digest);
        assert!(matches!(
            deaggregate(&Bytes::from(garbage)),
            Deaggregated::Corrupt(_, Corruption::BadProtobuf)
        ));
        assert!(matches!(
            deaggregate(&Bytes::from_static(b"a 1 1\n")),
            Deaggregated::Plain(_)
        ));
    }

    #[test]
    fn the_aggregator_writes_what_deaggregate_reads_keys_shared() {
        let mut a = AggregateBuilder::new();
        let mut out = Vec::new();
        for round in 0..2 {
            for i in 0..300u64 {
                let key = format!("k{}", i % 7);
                let ehk = (i % 5 == 0).then_some("170141183460469231731687303715884105728");
                a.push(&key, ehk, format!("m.{i} {round} 1\n").as_bytes());
            }
            assert_eq!(a.first_partition_key(), b"k0");
            let before = out.len();
            let predicted = a.encoded_len();
            a.finish(&mut out);
            assert_eq!(out.len() - before, predicted);
            assert!(a.is_empty());
            let Deaggregated::Aggregated(agg) =
                deaggregate(&Bytes::copy_from_slice(&out[before..]))
            else {
                panic!("not an aggregate");
            };
            assert_eq!(agg.partition_key_table.len(), 7, "keys de-duplicated");
            assert_eq!(agg.explicit_hash_key_table.len(), 1);
            assert_eq!(agg.records.len(), 300);
            for (i, r) in agg.records.iter().enumerate() {
                assert_eq!(agg.partition_key(r), format!("k{}", i % 7));
                assert_eq!(agg.explicit_hash_key(r).is_some(), i % 5 == 0);
                assert_eq!(r.data, format!("m.{i} {round} 1\n").as_bytes());
            }
            // The same bytes as prost's encoding of the same message.
            assert_eq!(aggregate(&agg), out[before..]);
        }
        assert!(AggregateBuilder::push_len(2, 12) >= 4 + 2 + 1 + 12 + 2);
    }
}
