//! KPL de-aggregation of one Kinesis record: an aggregate's user records are slices of it, a
//! record that is not a valid aggregate passes through whole.
#![no_main]

use anthracite_kinesis::kpl::deaggregate;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let record = Bytes::copy_from_slice(data);
    let d = deaggregate(&record);
    let _ = format!("{d:?}");
});
