//! One spill record: a checksummed header followed by one serialized [`Batch`].
//!
//! ```text
//! header (16 bytes, little-endian)
//!   u32  payload length in bytes
//!   u32  CRC32C over header[0..4] ++ header[8..16] ++ payload
//!   u64  append time, milliseconds since the Unix epoch (for max_age)
//! payload
//!   varint  datapoint count
//!   per datapoint:
//!     varint  name length
//!     bytes   name
//!     u64     timestamp, f64 bits
//!     u64     value, f64 bits
//! ```
//!
//! Varints are unsigned LEB128. Floats travel as their raw bits, so every value — negative zero,
//! subnormals, infinities — comes back bit-exact. Decoding never trusts a length: every count and
//! name length is checked against the bytes actually present before anything is allocated, and
//! the payload itself is bounded by the caller (the segment size) before it is read.

use crate::batch::Batch;

/// Bytes in a record header.
pub(crate) const RECORD_HEADER_LEN: usize = 16;

/// Smallest encoding of one datapoint: a 1-byte name length, an empty name and two floats.
const MIN_POINT_LEN: usize = 1 + 16;

/// Why a payload could not be decoded. A record whose CRC matched should never produce one;
/// the log treats either as corruption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A varint ran past the end of the payload or past 64 bits.
    #[error("malformed varint")]
    Varint,
    /// The datapoint count cannot fit in the payload.
    #[error("datapoint count exceeds payload")]
    Count,
    /// A name or float ran past the end of the payload.
    #[error("datapoint runs past end of payload")]
    Truncated,
    /// Bytes were left over after the last datapoint.
    #[error("trailing bytes after last datapoint")]
    Trailing,
    /// The names would not fit in one batch (cannot happen with a `u32` payload length).
    #[error("names exceed one batch")]
    TooLarge,
}

/// A parsed record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordHeader {
    /// Payload length in bytes (the header excluded).
    pub len: u32,
    /// Stored CRC32C.
    pub crc: u32,
    /// Append time in milliseconds since the Unix epoch.
    pub appended_ms: u64,
}

impl RecordHeader {
    /// Parses the 16 header bytes. Every bit pattern parses; [`RecordHeader::verify`] decides.
    pub(crate) fn parse(bytes: &[u8; RECORD_HEADER_LEN]) -> Self {
        let [l0, l1, l2, l3, c0, c1, c2, c3, t @ ..] = *bytes;
        RecordHeader {
            len: u32::from_le_bytes([l0, l1, l2, l3]),
            crc: u32::from_le_bytes([c0, c1, c2, c3]),
            appended_ms: u64::from_le_bytes(t),
        }
    }

    /// Whole record length: header plus payload.
    pub(crate) fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN as u64 + u64::from(self.len)
    }

    /// True when `payload` (exactly `len` bytes) matches the stored CRC.
    pub(crate) fn verify(&self, payload: &[u8]) -> bool {
        payload.len() == self.len as usize
            && checksum(self.len, self.appended_ms, payload) == self.crc
    }
}

fn checksum(len: u32, appended_ms: u64, payload: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&len.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &appended_ms.to_le_bytes());
    crc32c::crc32c_append(crc, payload)
}

#[inline]
#[cfg(test)]
fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos).ok_or(DecodeError::Varint)?;
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeError::Varint)
}

/// Payload bytes `batch` encodes to (header excluded).
#[cfg(test)]
fn payload_len(batch: &Batch) -> usize {
    varint_len(batch.len() as u64)
        + batch
            .iter()
            .map(|d| varint_len(d.name.len() as u64) + d.name.len() + 16)
            .sum::<usize>()
}

/// Encodes `batch` as one whole record (header and payload) into `out`, replacing its contents.
pub fn encode_record(batch: &Batch, appended_ms: u64, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(RECORD_HEADER_LEN + batch.name_bytes() + batch.len() * (16 + 2) + 10);
    out.extend_from_slice(&[0u8; RECORD_HEADER_LEN]);
    put_varint(out, batch.len() as u64);
    for d in batch.iter() {
        put_varint(out, d.name.len() as u64);
        out.extend_from_slice(d.name);
        out.extend_from_slice(&d.timestamp.to_bits().to_le_bytes());
        out.extend_from_slice(&d.value.to_bits().to_le_bytes());
    }
    // Payloads are bounded by the segment size (validated ≤ u32::MAX) before they are written.
    let len = (out.len() - RECORD_HEADER_LEN) as u32;
    let crc = checksum(len, appended_ms, &out[RECORD_HEADER_LEN..]);
    out[0..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out[8..16].copy_from_slice(&appended_ms.to_le_bytes());
}

/// The datapoint count a payload declares, checked against the payload's size.
pub fn payload_datapoints(payload: &[u8]) -> Result<u64, DecodeError> {
    let mut pos = 0;
    let count = get_varint(payload, &mut pos)?;
    if count > ((payload.len() - pos) / MIN_POINT_LEN) as u64 {
        return Err(DecodeError::Count);
    }
    Ok(count)
}

#[inline]
fn get_f64(buf: &[u8], pos: &mut usize) -> Result<f64, DecodeError> {
    let bytes: [u8; 8] = buf
        .get(*pos..*pos + 8)
        .and_then(|s| s.try_into().ok())
        .ok_or(DecodeError::Truncated)?;
    *pos += 8;
    Ok(f64::from_bits(u64::from_le_bytes(bytes)))
}

/// Decodes a payload into a batch. Never panics; allocation is bounded by `payload.len()`.
pub fn decode_batch(payload: &[u8]) -> Result<Batch, DecodeError> {
    let mut pos = 0;
    let count = get_varint(payload, &mut pos)?;
    if count > ((payload.len() - pos) / MIN_POINT_LEN) as u64 {
        return Err(DecodeError::Count);
    }
    let count = count as usize;
    let mut batch = Batch::with_capacity(count, payload.len() - pos - count * MIN_POINT_LEN);
    for _ in 0..count {
        let len = get_varint(payload, &mut pos)?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| pos.checked_add(len))
            .filter(|&end| end <= payload.len())
            .ok_or(DecodeError::Truncated)?;
        let name = &payload[pos..end];
        pos = end;
        let timestamp = get_f64(payload, &mut pos)?;
        let value = get_f64(payload, &mut pos)?;
        batch
            .push(name, timestamp, value)
            .map_err(|_| DecodeError::TooLarge)?;
    }
    if pos != payload.len() {
        return Err(DecodeError::Trailing);
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Batch {
        let mut b = Batch::new();
        b.push(b"carbon.agents.host-a.cpuUsage", 1_700_000_000.0, -0.0)
            .expect("batch has room");
        b.push(b"", f64::INFINITY, f64::from_bits(1))
            .expect("batch has room"); // subnormal
        b.push(&[b'x'; 300], 1.5, f64::NEG_INFINITY)
            .expect("batch has room");
        b
    }

    fn bits(b: &Batch) -> Vec<(Vec<u8>, u64, u64)> {
        b.iter()
            .map(|d| (d.name.to_vec(), d.timestamp.to_bits(), d.value.to_bits()))
            .collect()
    }

    #[test]
    fn record_roundtrips_bit_exact() {
        let batch = sample();
        let mut out = Vec::new();
        encode_record(&batch, 42, &mut out);
        assert_eq!(out.len(), RECORD_HEADER_LEN + payload_len(&batch));
        let header = RecordHeader::parse(&out[..16].try_into().unwrap());
        assert_eq!(header.appended_ms, 42);
        assert!(header.verify(&out[16..]));
        assert_eq!(payload_datapoints(&out[16..]), Ok(3));
        assert_eq!(bits(&decode_batch(&out[16..]).unwrap()), bits(&batch));
    }

    #[test]
    fn flipped_bit_fails_crc() {
        let mut out = Vec::new();
        encode_record(&sample(), 7, &mut out);
        for i in [0usize, 9, 20, out.len() - 1] {
            let mut copy = out.clone();
            copy[i] ^= 0x10;
            let header = RecordHeader::parse(&copy[..16].try_into().unwrap());
            let payload = &copy[16..];
            assert!(!header.verify(payload), "flip at {i} undetected");
        }
    }

    #[test]
    fn huge_declared_count_is_rejected_without_allocating() {
        let mut payload = Vec::new();
        put_varint(&mut payload, u64::MAX);
        assert_eq!(decode_batch(&payload), Err(DecodeError::Count));
        assert_eq!(decode_batch(&[0xff; 11]), Err(DecodeError::Varint));
        assert_eq!(decode_batch(&[]), Err(DecodeError::Varint));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_batch(&bytes);
            let _ = payload_datapoints(&bytes);
        }

        #[test]
        fn roundtrip_any_batch(points in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..40), any::<u64>(), any::<u64>()), 0..20)) {
            let mut batch = Batch::new();
            for (name, t, v) in &points {
                batch.push(name, f64::from_bits(*t), f64::from_bits(*v)).expect("batch has room");
            }
            let mut out = Vec::new();
            encode_record(&batch, 1, &mut out);
            let decoded = decode_batch(&out[RECORD_HEADER_LEN..]);
            prop_assert_eq!(decoded.map(|b| bits(&b)), Ok(bits(&batch)));
        }
    }
}
