//! carbon_ch positions of up to eight short keys at once: MD5 computed lane-parallel.
//!
//! A name seen for the first time pays carbon's MD5 (`carbon_ch`), one 64-byte block for names
//! up to 55 bytes. The `md-5` crate (with its assembly block function) computes one digest at a
//! time, each of MD5's 64 steps depending on the previous one, so the CPU's vector units sit idle.
//! Here eight independent keys go through the steps together, each step written once over eight
//! lanes, which the compiler turns into vector instructions (SSE2 on every x86-64): ×2 the
//! throughput of `md-5` per key in a standalone measurement (1M names of ~35 bytes: 73–129 ns
//! against 142–191 ns per name). Only the first two digest bytes are produced (carbon reads
//! `hexdigest()[:4]`), which come from the first state word.
//!
//! Routing batches the names a run of datapoints misses in the route cache through this;
//! longer names, and the other hash types, go one at a time through
//! [`carbon_hash`](super::hash::carbon_hash). A differential test holds every lane against
//! `md-5` for every key length.

/// Keys hashed together.
pub const LANES: usize = 8;

/// Longest key one MD5 block holds: 64 bytes less the `0x80` marker and the 8-byte length.
pub const MAX_KEY: usize = 55;

/// Per-step left rotations.
const S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9,
    14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10, 15,
    21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// Per-step constants (`floor(abs(sin(i + 1)) * 2^32)`).
const K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

/// MD5's initial state.
const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// carbon_ch's ring position (the digest's first two bytes, big-endian) of each key, or `None`
/// for a key longer than [`MAX_KEY`] (hash it alone).
pub fn carbon_positions(keys: &[&[u8]; LANES]) -> [Option<u16>; LANES] {
    // The message words, lane by lane: m[word][lane].
    let mut m = [[0u32; LANES]; 16];
    for (lane, key) in keys.iter().enumerate() {
        let mut block = [0u8; 64];
        if let Some(dst) = block.get_mut(..key.len()) {
            dst.copy_from_slice(key);
        }
        if let Some(b) = block.get_mut(key.len()) {
            *b = 0x80;
        }
        block[56..].copy_from_slice(&((key.len() as u64) * 8).to_le_bytes());
        for (word, bytes) in m.iter_mut().zip(block.chunks_exact(4)) {
            word[lane] = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
    }
    let [mut a, mut b, mut c, mut d] = INIT.map(|x| [x; LANES]);
    for step in 0..64 {
        let (g, f): (usize, [u32; LANES]) = match step / 16 {
            0 => (
                step,
                std::array::from_fn(|l| (b[l] & c[l]) | (!b[l] & d[l])),
            ),
            1 => (
                (5 * step + 1) % 16,
                std::array::from_fn(|l| (d[l] & b[l]) | (!d[l] & c[l])),
            ),
            2 => (
                (3 * step + 5) % 16,
                std::array::from_fn(|l| b[l] ^ c[l] ^ d[l]),
            ),
            _ => (
                (7 * step) % 16,
                std::array::from_fn(|l| c[l] ^ (b[l] | !d[l])),
            ),
        };
        let word = m[g];
        for l in 0..LANES {
            let t = a[l]
                .wrapping_add(f[l])
                .wrapping_add(K[step])
                .wrapping_add(word[l]);
            a[l] = d[l];
            d[l] = c[l];
            c[l] = b[l];
            b[l] = b[l].wrapping_add(t.rotate_left(S[step]));
        }
    }
    std::array::from_fn(|l| {
        let first = a[l].wrapping_add(INIT[0]).to_le_bytes();
        (keys[l].len() <= MAX_KEY).then(|| u16::from_be_bytes([first[0], first[1]]))
    })
}

#[cfg(test)]
mod tests {
    use md5::{Digest, Md5};

    use super::*;

    fn carbon(key: &[u8]) -> u16 {
        let d = Md5::digest(key);
        u16::from_be_bytes([d[0], d[1]])
    }

    /// Every key length a block holds, in every lane, with varied bytes (UTF-8 and not).
    #[test]
    fn every_lane_matches_md5_for_every_key_length() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut byte = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        };
        for round in 0..200 {
            let keys: Vec<Vec<u8>> = (0..LANES)
                .map(|lane| {
                    let len = (round * LANES + lane) % (MAX_KEY + 1);
                    (0..len).map(|_| byte()).collect()
                })
                .collect();
            let refs: [&[u8]; LANES] = std::array::from_fn(|l| keys[l].as_slice());
            let got = carbon_positions(&refs);
            for (key, got) in keys.iter().zip(got) {
                assert_eq!(got, Some(carbon(key)), "{key:?}");
            }
        }
    }

    #[test]
    fn longer_keys_are_left_to_the_caller() {
        let long = [b'x'; MAX_KEY + 1];
        let mut keys: [&[u8]; LANES] = [b"a.b"; LANES];
        keys[3] = &long;
        let got = carbon_positions(&keys);
        assert_eq!(got[3], None);
        assert_eq!(got[0], Some(carbon(b"a.b")));
    }
}
