//! Every vector in tests/compat/kpl-vectors.json through `kpl::deaggregate` and the
//! encoder, `kpl::AggregateBuilder` (no server).

use anthracite_testkit as support;

use anthracite_kinesis::kpl::{AggregateBuilder, Deaggregated, deaggregate};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;

fn vectors() -> serde_json::Value {
    let path = support::compat_path("kpl-vectors.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("kpl-vectors.json is JSON")
}

fn b64(v: &serde_json::Value) -> Bytes {
    Bytes::from(
        STANDARD
            .decode(v.as_str().expect("base64 string"))
            .expect("valid base64"),
    )
}

#[test]
fn every_positive_vector_deaggregates_exactly() {
    let v = vectors();
    let list = v["vectors"].as_array().expect("vectors");
    assert!(!list.is_empty());
    for vector in list {
        let name = vector["name"].as_str().unwrap_or("?");
        let data = b64(&vector["data_b64"]);
        let Deaggregated::Aggregated(agg) = deaggregate(&data) else {
            panic!("{name}: not recognised as an aggregate");
        };
        let expected = vector["user_records"].as_array().expect("user_records");
        assert_eq!(agg.records.len(), expected.len(), "{name}");
        for (i, (got, want)) in agg.records.iter().zip(expected).enumerate() {
            assert_eq!(
                want["sub_sequence_number"].as_u64(),
                Some(i as u64),
                "{name}[{i}]"
            );
            assert_eq!(
                Some(agg.partition_key(got)),
                want["partition_key"].as_str(),
                "{name}[{i}]"
            );
            // By proto2 field presence, as the KCL does (not aws-kinesis-agg's quirk).
            assert_eq!(
                got.explicit_hash_key_index.is_some(),
                want["has_explicit_hash_key_index"].as_bool().expect("bool"),
                "{name}[{i}]"
            );
            if want["has_explicit_hash_key_index"].as_bool() == Some(true) {
                assert_eq!(
                    agg.explicit_hash_key(got),
                    want["explicit_hash_key"].as_str(),
                    "{name}[{i}]"
                );
            } else {
                assert_eq!(agg.explicit_hash_key(got), None, "{name}[{i}]");
            }
            assert_eq!(got.data, b64(&want["data_b64"]), "{name}[{i}]");
        }
    }
}

#[test]
fn every_negative_vector_passes_through_as_one_plain_record() {
    let v = vectors();
    for vector in v["negative"].as_array().expect("negative") {
        let name = vector["name"].as_str().unwrap_or("?");
        assert_eq!(vector["expected"], "passthrough_single_record", "{name}");
        let data = b64(&vector["data_b64"]);
        match deaggregate(&data) {
            Deaggregated::Plain(d) | Deaggregated::Corrupt(d, _) => assert_eq!(d, data, "{name}"),
            Deaggregated::Aggregated(_) => panic!("{name}: must not be de-aggregated"),
        }
    }
}

#[test]
fn the_aggregator_reproduces_every_positive_vector_byte_for_byte() {
    let v = vectors();
    let mut a = AggregateBuilder::new();
    for vector in v["vectors"].as_array().expect("vectors") {
        let name = vector["name"].as_str().unwrap_or("?");
        for r in vector["user_records"].as_array().expect("user_records") {
            let ehk = if r["has_explicit_hash_key_index"].as_bool() == Some(true) {
                r["explicit_hash_key"].as_str()
            } else {
                None
            };
            a.push(
                r["partition_key"].as_str().expect("partition key"),
                ehk,
                &b64(&r["data_b64"]),
            );
        }
        assert_eq!(
            std::str::from_utf8(a.first_partition_key()).ok(),
            vector["outer_partition_key"].as_str(),
            "{name}"
        );
        let mut out = Vec::new();
        a.finish(&mut out);
        assert_eq!(Bytes::from(out), b64(&vector["data_b64"]), "{name}");
    }
}
