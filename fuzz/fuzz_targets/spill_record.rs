//! Spill records as recovery and replay read them: arbitrary segment files and ledgers (the
//! disk can hold anything after a crash), and arbitrary payloads wrapped in records whose CRC
//! is right, so decoding is reached past the checksum. Never a panic; what is read back is
//! exactly what the log counted.
#![no_main]

use std::path::Path;

use anthracite::unstable::queue::spill::record::{decode_batch, payload_datapoints};
use anthracite::unstable::queue::spill::segment::{SEGMENT_HEADER, file_name};
use anthracite::unstable::queue::spill::{MemFs, SpillConfig, SpillFs, SpillLog, SpillWriter};
use libfuzzer_sys::fuzz_target;

/// `len | crc32c(len ++ append_ms ++ payload) | append_ms | payload`.
fn record(payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_le_bytes();
    let ms = 1_700_000_000_000u64.to_le_bytes();
    let mut crc = crc32c::crc32c(&len);
    crc = crc32c::crc32c_append(crc, &ms);
    crc = crc32c::crc32c_append(crc, payload);
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&ms);
    out.extend_from_slice(payload);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let _ = payload_datapoints(rest);
    let _ = decode_batch(rest);
    let fs = MemFs::new();
    let dir = Path::new("/spill");
    let _ = fs.create_dir_all(dir);
    let Ok(mut w) = fs.create(&dir.join(file_name(1))) else {
        return;
    };
    let mut segment = SEGMENT_HEADER.to_vec();
    match mode % 3 {
        // Raw segment contents after a valid header.
        0 => segment.extend_from_slice(rest),
        // Payloads with valid CRCs, split at 0xff bytes.
        1 => {
            for payload in rest.split(|&b| b == 0xff) {
                segment.extend_from_slice(&record(payload));
            }
        }
        // A whole file, header included, and a ledger.
        _ => {
            segment = rest.to_vec();
            if let Ok(mut l) = fs.create(&dir.join("ledger")) {
                let _ = l.append(rest.get(..28).unwrap_or(rest));
            }
        }
    }
    let _ = w.append(&segment);
    let config = SpillConfig {
        segment_bytes: 1 << 20,
        max_bytes: 4 << 20,
        ..SpillConfig::default()
    };
    let Ok((mut log, report)) = SpillLog::open_with(fs, dir, config) else {
        return;
    };
    let mut read = 0;
    while let Ok(Some(batch)) = log.read_next() {
        read += batch.len() as u64;
        if read > report.datapoints {
            panic!("read back more than recovery counted");
        }
    }
});
