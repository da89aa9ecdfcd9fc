//! KPL de-aggregation: one Kinesis record → its user records.
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

use bytes::Bytes;
use md5::{Digest, Md5};

/// The four bytes that open an aggregated record.
pub const MAGIC: [u8; 4] = [0xF3, 0x89, 0x9A, 0xC2];
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
}
