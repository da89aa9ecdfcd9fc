//! carbon_ch positions of eight or sixteen keys (of at most two MD5 blocks) at once: MD5 computed
//! lane-parallel.
//!
//! carbon's MD5 (`carbon_ch`) takes one 64-byte block for names up to 55 bytes, two up to 119
//! bytes. The `md-5` crate (with its assembly block function) computes one digest at a
//! time, each of MD5's 64 steps depending on the previous one, so the CPU's vector units sit idle.
//! Here eight independent keys go through the steps together, each step written once over eight
//! lanes: in AVX2 where the CPU has it (one instruction per operation for all eight lanes, the
//! steps unrolled so that rotations are immediate shifts), otherwise in plain Rust that the
//! compiler turns into vector instructions (SSE2 on every x86-64). With AVX-512 a rotation and
//! each round function are one instruction. One-block keys go sixteen at a time
//! ([`carbon_positions_wide`]: in 512-bit registers, or with AVX2 as two groups of eight
//! whose steps interleave): the steps are one chain, each waiting on the one before, so the
//! chain's length, not the lanes' count, sets the time. Only the first two digest
//! bytes are produced (carbon reads `hexdigest()[:4]`), which come from the first state word.
//!
//! Eight keys of one block each take one pass; a group with a two-block key takes two, every
//! lane taking the state after its own last block. A run of datapoints routes its `carbon_ch`
//! names up to 119 bytes through this on every sighting (it costs less than a route-cache
//! lookup: [`RouteCache::computes`](super::RouteCache::computes)), and the other names its
//! cache lookups missed; longer names, and the other hash types, go one at a time through
//! [`carbon_hash`](super::hash::carbon_hash). A differential test holds every lane against
//! `md-5` for every key length.

/// Keys hashed together.
pub(crate) const LANES: usize = 8;

/// Longest key one MD5 block holds: 64 bytes less the `0x80` marker and the 8-byte length.
pub(crate) const ONE_BLOCK_KEY: usize = 55;

/// Longest key hashed here: two blocks (names up to 119 bytes, which covers most metric
/// names; longer ones are rare enough to go one at a time).
pub(crate) const MAX_KEY: usize = 64 + ONE_BLOCK_KEY;

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
/// for a key longer than [`MAX_KEY`] (hash it alone). `kernel` is [`Kernel::detect`]'s answer.
/// A group of one-block keys is hashed in one pass; when any key needs two blocks, every lane
/// goes through both and each takes the state after its own last block.
#[inline]
pub(crate) fn carbon_positions(kernel: Kernel, keys: &[&[u8]; LANES]) -> [Option<u16>; LANES] {
    let first = if keys.iter().all(|k| k.len() <= ONE_BLOCK_KEY) {
        let m = one_block_words(keys);
        match kernel.0 {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Impl::Avx2` is only chosen by `Kernel::detect`, on a CPU that has AVX2.
            Impl::Avx2 => unsafe { avx2::first_words(&m) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Impl::Avx512` is only chosen on a CPU that has AVX-512F, VL and BW.
            Impl::Avx512 => unsafe { avx512::first_words(&m) },
            Impl::Portable => portable::compress(&INIT.map(|x| [x; LANES]), &m)[0],
        }
    } else {
        let [m0, m1] = two_block_words(keys);
        let (one, two) = match kernel.0 {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Impl::Avx2 => unsafe { avx2::two_blocks(&m0, &m1) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            Impl::Avx512 => unsafe { avx512::two_blocks(&m0, &m1) },
            Impl::Portable => {
                let one = portable::compress(&INIT.map(|x| [x; LANES]), &m0);
                let two = portable::compress(&one, &m1);
                (one[0], two[0])
            }
        };
        std::array::from_fn(|l| {
            if keys[l].len() <= ONE_BLOCK_KEY {
                one[l]
            } else {
                two[l]
            }
        })
    };
    std::array::from_fn(|l| {
        let first = first[l].to_le_bytes();
        (keys[l].len() <= MAX_KEY).then(|| u16::from_be_bytes([first[0], first[1]]))
    })
}

/// Keys [`carbon_positions_wide`] hashes together.
pub(crate) const WIDE_LANES: usize = 2 * LANES;

/// [`carbon_positions`] of sixteen keys. MD5's steps form one chain, each waiting on the one
/// before, so twice the lanes cost about the time of one chain: one-block keys go through the
/// steps together, in one 512-bit register per state word with AVX-512, in two 256-bit
/// registers whose steps interleave with AVX2. The portable kernel, and a group with a longer
/// key, go as two groups of eight, one after the other.
#[inline]
pub(crate) fn carbon_positions_wide(
    kernel: Kernel,
    keys: &[&[u8]; WIDE_LANES],
) -> [Option<u16>; WIDE_LANES] {
    #[cfg(target_arch = "x86_64")]
    if keys.iter().all(|k| k.len() <= ONE_BLOCK_KEY) {
        let first = match kernel.0 {
            // SAFETY: `Impl::Avx512` is only chosen on a CPU that has AVX-512F, VL and BW;
            // every key is at most ONE_BLOCK_KEY bytes.
            Impl::Avx512 => Some(unsafe { avx512::first_words_wide(keys) }),
            Impl::Avx2 => {
                let mut m = [[[0u32; LANES]; 16]; 2];
                for (group, m) in keys.as_chunks::<LANES>().0.iter().zip(&mut m) {
                    one_block_words_into(group, m);
                }
                // SAFETY: `Impl::Avx2` is only chosen by `Kernel::detect`, on a CPU that has
                // AVX2.
                let halves = unsafe { avx2::first_words_pair(&m[0], &m[1]) };
                Some(std::array::from_fn(|l| halves[l / LANES][l % LANES]))
            }
            Impl::Portable => None,
        };
        if let Some(first) = first {
            return first.map(|first| {
                let first = first.to_le_bytes();
                Some(u16::from_be_bytes([first[0], first[1]]))
            });
        }
    }
    let (low, high) = keys.split_at(LANES);
    let halves = [low, high].map(|half| {
        let half: [&[u8]; LANES] =
            std::array::from_fn(|l| half.get(l).copied().unwrap_or_default());
        carbon_positions(kernel, &half)
    });
    std::array::from_fn(|l| halves[l / LANES][l % LANES])
}

/// Which implementation of the steps runs: chosen once per run of names from what the CPU
/// offers (the answers are the same; AVX2 does the eight lanes in one instruction per
/// operation, SSE2 in two, and the AVX2 steps are unrolled so that each rotation is an
/// immediate shift). Only [`detect`](Self::detect) can choose AVX2, so a `Kernel` never names
/// instructions the CPU lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Kernel(Impl);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    /// AVX2 (x86-64 CPUs since 2013).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2's eight lanes with AVX-512VL's rotation and three-input logic instructions, and
    /// sixteen lanes in 512-bit registers (AVX-512F, VL and BW).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// Plain Rust over arrays of lanes, vectorised by the compiler for the build's target.
    Portable,
}

impl Kernel {
    /// The kernel every CPU runs.
    pub(crate) const PORTABLE: Self = Self(Impl::Portable);

    /// True when [`carbon_positions_wide`] hashes its sixteen keys in one pass (AVX-512's
    /// sixteen lanes, or AVX2's two groups of eight interleaved).
    #[inline]
    pub(crate) fn is_wide(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.0, Impl::Avx512 | Impl::Avx2) {
            return true;
        }
        false
    }

    /// The fastest kernel this CPU runs (the check is cached by the standard library).
    #[inline]
    pub(crate) fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                return Self(Impl::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Self(Impl::Avx2);
            }
        }
        Self::PORTABLE
    }

    /// Every kernel this CPU runs, the portable one first (for the differential tests).
    #[cfg(test)]
    fn available() -> Vec<Self> {
        let mut kernels = vec![Self::PORTABLE];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                kernels.push(Self(Impl::Avx2));
            }
            if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
            {
                kernels.push(Self(Impl::Avx512));
            }
        }
        kernels
    }
}

/// The padded one-block message of each key (all at most [`ONE_BLOCK_KEY`] bytes), lane by
/// lane: `m[word][lane]`. The padding is MD5's: the key, `0x80`, zeros, the key's length in
/// bits in the last eight bytes.
#[inline]
fn one_block_words(keys: &[&[u8]; LANES]) -> [[u32; LANES]; 16] {
    let mut m = [[0u32; LANES]; 16];
    one_block_words_into(keys, &mut m);
    m
}

/// [`one_block_words`] into `m`, which holds zeros: what the AVX2 kernel reads, written in
/// place (a group's words built apart and returned are zeroed and then copied).
#[inline(always)]
fn one_block_words_into(keys: &[&[u8]; LANES], m: &mut [[u32; LANES]; 16]) {
    for (lane, key) in keys
        .iter()
        .enumerate()
        .filter(|(_, k)| k.len() <= ONE_BLOCK_KEY)
    {
        padded_words(key, 16, |word, value| m[word][lane] = value);
    }
}

/// The two blocks of each key's padded message, lane by lane: `m[block][word][lane]`. A key
/// of one block ends (length included) in the first, and its lane's second block is not
/// used; a key longer than [`MAX_KEY`] leaves its lane's words meaningless (its answer is
/// discarded).
#[inline]
fn two_block_words(keys: &[&[u8]; LANES]) -> [[[u32; LANES]; 16]; 2] {
    let mut m = [[[0u32; LANES]; 16]; 2];
    for (lane, key) in keys.iter().enumerate() {
        if key.len() > MAX_KEY {
            continue;
        }
        let words = if key.len() <= ONE_BLOCK_KEY { 16 } else { 32 };
        padded_words(key, words, |word, value| {
            m[word / 16][word % 16][lane] = value
        });
    }
    m
}

/// MD5's padded message of `key` (at most `words * 4 - 9` bytes) as little-endian words,
/// each given once to `set` with its index; words left out are zero. The words are read
/// straight from the key: copying it into a byte block and reading words back makes every
/// read wait on the copy's stores (the loads straddle them), which costs more than the
/// compression itself.
#[inline(always)]
fn padded_words(key: &[u8], words: usize, mut set: impl FnMut(usize, u32)) {
    let mut chunks = key.chunks_exact(4);
    let mut word = 0;
    for chunk in chunks.by_ref() {
        set(
            word,
            u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
        );
        word += 1;
    }
    let tail = chunks.remainder();
    let mut last = 0x80u32 << (8 * tail.len());
    for (i, byte) in tail.iter().enumerate() {
        last |= u32::from(*byte) << (8 * i);
    }
    set(word, last);
    let bits = (key.len() as u64) * 8;
    set(words - 2, bits as u32);
    set(words - 1, (bits >> 32) as u32);
}

/// The steps written once over arrays of lanes.
mod portable {
    use super::{K, LANES, S};

    /// MD5's compression of one block `m` into `state`, lane by lane: the state after it.
    pub(super) fn compress(state: &[[u32; LANES]; 4], m: &[[u32; LANES]; 16]) -> [[u32; LANES]; 4] {
        let [mut a, mut b, mut c, mut d] = *state;
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
        let add =
            |x: [u32; LANES], s: [u32; LANES]| std::array::from_fn(|l| x[l].wrapping_add(s[l]));
        [
            add(a, state[0]),
            add(b, state[1]),
            add(c, state[2]),
            add(d, state[3]),
        ]
    }
}

/// Four steps, the state words taking their turns (`step!` is the vector module's own).
macro_rules! quad {
    ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $m:ident, $k:literal,
     [$g0:literal, $g1:literal, $g2:literal, $g3:literal],
     [$s0:literal, $s1:literal, $s2:literal, $s3:literal]) => {
        step!($f, $a, $b, $c, $d, $m[$g0], K[$k], $s0);
        step!($f, $d, $a, $b, $c, $m[$g1], K[$k + 1], $s1);
        step!($f, $c, $d, $a, $b, $m[$g2], K[$k + 2], $s2);
        step!($f, $b, $c, $d, $a, $m[$g3], K[$k + 3], $s3);
    };
}

/// Steps 0–59 (all but the last quad).
macro_rules! rounds {
    ($a:ident, $b:ident, $c:ident, $d:ident, $m:ident) => {
        quad!(f, $a, $b, $c, $d, $m, 0, [0, 1, 2, 3], [7, 12, 17, 22]);
        quad!(f, $a, $b, $c, $d, $m, 4, [4, 5, 6, 7], [7, 12, 17, 22]);
        quad!(f, $a, $b, $c, $d, $m, 8, [8, 9, 10, 11], [7, 12, 17, 22]);
        quad!(f, $a, $b, $c, $d, $m, 12, [12, 13, 14, 15], [7, 12, 17, 22]);
        quad!(g, $a, $b, $c, $d, $m, 16, [1, 6, 11, 0], [5, 9, 14, 20]);
        quad!(g, $a, $b, $c, $d, $m, 20, [5, 10, 15, 4], [5, 9, 14, 20]);
        quad!(g, $a, $b, $c, $d, $m, 24, [9, 14, 3, 8], [5, 9, 14, 20]);
        quad!(g, $a, $b, $c, $d, $m, 28, [13, 2, 7, 12], [5, 9, 14, 20]);
        quad!(h, $a, $b, $c, $d, $m, 32, [5, 8, 11, 14], [4, 11, 16, 23]);
        quad!(h, $a, $b, $c, $d, $m, 36, [1, 4, 7, 10], [4, 11, 16, 23]);
        quad!(h, $a, $b, $c, $d, $m, 40, [13, 0, 3, 6], [4, 11, 16, 23]);
        quad!(h, $a, $b, $c, $d, $m, 44, [9, 12, 15, 2], [4, 11, 16, 23]);
        quad!(i, $a, $b, $c, $d, $m, 48, [0, 7, 14, 5], [6, 10, 15, 21]);
        quad!(i, $a, $b, $c, $d, $m, 52, [12, 3, 10, 1], [6, 10, 15, 21]);
        quad!(i, $a, $b, $c, $d, $m, 56, [8, 15, 6, 13], [6, 10, 15, 21]);
    };
}

/// The eight-lane kernel's loads, stores, compression and entry points, the same in each
/// vector module but for the CPU features they are compiled for (`step!` is the module's own).
#[cfg(target_arch = "x86_64")]
macro_rules! eight_lanes {
    ($features:literal, $safety:literal) => {
        /// The message words as vectors of eight lanes.
        #[inline]
        #[target_feature(enable = $features)]
        fn load(words: &[[u32; LANES]; 16]) -> [__m256i; 16] {
            // SAFETY: each `words[i]` is 32 readable bytes; unaligned loads.
            std::array::from_fn(|i| unsafe { _mm256_loadu_si256(words[i].as_ptr().cast()) })
        }

        /// The eight lanes of `v`.
        #[inline]
        #[target_feature(enable = $features)]
        fn lanes(v: __m256i) -> [u32; LANES] {
            let mut out = [0u32; LANES];
            // SAFETY: `out` is 32 writable bytes; unaligned store.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
            out
        }

        /// MD5's compression of one block `m` into `state`: the state after it.
        #[inline]
        #[target_feature(enable = $features)]
        fn compress(state: [__m256i; 4], m: &[__m256i; 16]) -> [__m256i; 4] {
            let [mut a, mut b, mut c, mut d] = state;
            rounds!(a, b, c, d, m);
            quad!(i, a, b, c, d, m, 60, [4, 11, 2, 9], [6, 10, 15, 21]);
            [
                _mm256_add_epi32(a, state[0]),
                _mm256_add_epi32(b, state[1]),
                _mm256_add_epi32(c, state[2]),
                _mm256_add_epi32(d, state[3]),
            ]
        }

        /// The first state word of each lane after the first block, and after the second.
        ///
        /// # Safety
        ///
        #[doc = $safety]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn two_blocks(
            first: &[[u32; LANES]; 16],
            second: &[[u32; LANES]; 16],
        ) -> ([u32; LANES], [u32; LANES]) {
            let one = compress(INIT.map(|x| _mm256_set1_epi32(x as i32)), &load(first));
            let two = compress(one, &load(second));
            (lanes(one[0]), lanes(two[0]))
        }

        /// The digest's first state word of each lane, for one-block messages.
        ///
        /// # Safety
        ///
        #[doc = $safety]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn first_words(words: &[[u32; LANES]; 16]) -> [u32; LANES] {
            let m = load(words);
            let [mut a, mut b, mut c, mut d] = INIT.map(|x| _mm256_set1_epi32(x as i32));
            rounds!(a, b, c, d, m);
            // Step 60 is the last to change `a` (61–63 change d, c and b).
            step!(i, a, b, c, d, m[4], K[60], 6);
            lanes(_mm256_add_epi32(a, _mm256_set1_epi32(INIT[0] as i32)))
        }
    };
}

/// The steps in AVX2, one 256-bit register per state word (eight lanes of 32 bits), fully
/// unrolled. Only the first state word is read in the end, so a one-block message leaves out
/// the last three steps, which do not change it.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_loadu_si256, _mm256_or_si256,
        _mm256_set1_epi32, _mm256_setzero_si256, _mm256_slli_epi32, _mm256_srli_epi32,
        _mm256_storeu_si256, _mm256_xor_si256,
    };

    use super::{INIT, K, LANES};

    /// MD5's round functions.
    macro_rules! f {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_xor_si256($d, _mm256_and_si256($b, _mm256_xor_si256($c, $d)))
        };
    }
    macro_rules! g {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_xor_si256($c, _mm256_and_si256($d, _mm256_xor_si256($b, $c)))
        };
    }
    macro_rules! h {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_xor_si256($b, _mm256_xor_si256($c, $d))
        };
    }
    macro_rules! i {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_xor_si256(
                $c,
                _mm256_or_si256($b, _mm256_xor_si256($d, _mm256_set1_epi32(-1))),
            )
        };
    }

    /// `a = b + ((a + f(b, c, d) + k + word) <<< s)` on state words that are places (a
    /// variable, or one group's element in [`first_words_pair`]).
    macro_rules! lane_step {
        ($f:ident, $a:expr, $b:expr, $c:expr, $d:expr, $word:expr, $k:expr, $s:literal) => {
            // `a + word + k` does not wait on the step before; only `f` does.
            let t = _mm256_add_epi32(
                _mm256_add_epi32($a, _mm256_add_epi32($word, _mm256_set1_epi32($k as i32))),
                $f!($b, $c, $d),
            );
            $a = _mm256_add_epi32(
                $b,
                _mm256_or_si256(
                    _mm256_slli_epi32::<$s>(t),
                    _mm256_srli_epi32::<{ 32 - $s }>(t),
                ),
            );
        };
    }
    /// The step `eight_lanes!` and `rounds!` call; [`first_words_pair`] shadows it with its own.
    macro_rules! step {
        ($($step:tt)*) => {
            lane_step!($($step)*);
        };
    }

    eight_lanes!("avx2", "The CPU must support AVX2.");

    /// [`first_words`] of two groups of eight one-block messages, their steps interleaved.
    /// A group's steps form one chain, each waiting on the one before (round function, add,
    /// rotation, add: six instructions in a row), while the CPU could issue a step's ten
    /// instructions in about half that time; the other group's chain, independent, runs in
    /// the cycles the first leaves idle, so sixteen keys cost little more than eight.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn first_words_pair(
        low: &[[u32; LANES]; 16],
        high: &[[u32; LANES]; 16],
    ) -> [[u32; LANES]; 2] {
        /// The module's step on both groups: `[low, high]` in each variable.
        macro_rules! step {
            ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $word:expr, $k:expr, $s:literal) => {
                for j in 0..2 {
                    lane_step!($f, $a[j], $b[j], $c[j], $d[j], $word[j], $k, $s);
                }
            };
        }
        let mut m = [[_mm256_setzero_si256(); 2]; 16];
        for (w, pair) in m.iter_mut().enumerate() {
            // SAFETY: each `low[w]` and `high[w]` is 32 readable bytes; unaligned loads.
            *pair = unsafe {
                [
                    _mm256_loadu_si256(low[w].as_ptr().cast()),
                    _mm256_loadu_si256(high[w].as_ptr().cast()),
                ]
            };
        }
        let mut a = [_mm256_set1_epi32(INIT[0] as i32); 2];
        let mut b = [_mm256_set1_epi32(INIT[1] as i32); 2];
        let mut c = [_mm256_set1_epi32(INIT[2] as i32); 2];
        let mut d = [_mm256_set1_epi32(INIT[3] as i32); 2];
        rounds!(a, b, c, d, m);
        // Step 60 is the last to change `a` (61–63 change d, c and b).
        step!(i, a, b, c, d, m[4], K[60], 6);
        let init = _mm256_set1_epi32(INIT[0] as i32);
        [
            lanes(_mm256_add_epi32(a[0], init)),
            lanes(_mm256_add_epi32(a[1], init)),
        ]
    }
}

/// The AVX2 kernel's eight lanes with two AVX-512VL instructions in each step: the rotation
/// in one (`vprold`, where AVX2 shifts twice and merges) and each round function in one
/// (`vpternlogd`, where AVX2 needs two to three). MD5's steps form one chain, each waiting on
/// the one before, so the instructions on that chain (round function, add, rotation, add)
/// are what a run of names waits on.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_loadu_si256, _mm256_rol_epi32, _mm256_set1_epi32,
        _mm256_storeu_si256, _mm256_ternarylogic_epi32,
    };

    use std::arch::x86_64::__m512i;

    use super::{INIT, K, LANES, ONE_BLOCK_KEY, WIDE_LANES};

    // MD5's round functions as truth tables over (b, c, d) = (0xf0, 0xcc, 0xaa).
    /// `(b & c) | (!b & d)`.
    macro_rules! f {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_ternarylogic_epi32::<0xca>($b, $c, $d)
        };
    }
    /// `(d & b) | (!d & c)`.
    macro_rules! g {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_ternarylogic_epi32::<0xe4>($b, $c, $d)
        };
    }
    /// `b ^ c ^ d`.
    macro_rules! h {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_ternarylogic_epi32::<0x96>($b, $c, $d)
        };
    }
    /// `c ^ (b | !d)`.
    macro_rules! i {
        ($b:expr, $c:expr, $d:expr) => {
            _mm256_ternarylogic_epi32::<0x39>($b, $c, $d)
        };
    }

    /// `a = b + ((a + f(b, c, d) + k + word) <<< s)`.
    macro_rules! step {
        ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $word:expr, $k:expr, $s:literal) => {
            // `a + word + k` does not wait on the step before; only `f` does.
            let t = _mm256_add_epi32(
                _mm256_add_epi32($a, _mm256_add_epi32($word, _mm256_set1_epi32($k as i32))),
                $f!($b, $c, $d),
            );
            $a = _mm256_add_epi32($b, _mm256_rol_epi32::<$s>(t));
        };
    }

    /// Sixteen rows of sixteen 32-bit words → sixteen columns: `out[w]` lane `l` is
    /// `rows[l]` word `w`. Interleaving pairs of rows gives, per group of four rows, each
    /// 128-bit chunk `c` of `s[4g + k]` = word `4c + k` of rows `4g..4g + 4`; two rounds of
    /// 128-bit shuffles then gather chunk `c` of the four groups into word `4c + k`.
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512bw")]
    fn transpose(rows: [__m512i; 16]) -> [__m512i; 16] {
        use std::arch::x86_64::{
            _mm512_shuffle_i32x4, _mm512_unpackhi_epi32, _mm512_unpackhi_epi64,
            _mm512_unpacklo_epi32, _mm512_unpacklo_epi64,
        };
        let mut s = rows;
        for g in 0..4 {
            let r = &rows[4 * g..4 * g + 4];
            let t0 = _mm512_unpacklo_epi32(r[0], r[1]);
            let t1 = _mm512_unpackhi_epi32(r[0], r[1]);
            let t2 = _mm512_unpacklo_epi32(r[2], r[3]);
            let t3 = _mm512_unpackhi_epi32(r[2], r[3]);
            s[4 * g] = _mm512_unpacklo_epi64(t0, t2);
            s[4 * g + 1] = _mm512_unpackhi_epi64(t0, t2);
            s[4 * g + 2] = _mm512_unpacklo_epi64(t1, t3);
            s[4 * g + 3] = _mm512_unpackhi_epi64(t1, t3);
        }
        let mut out = s;
        for k in 0..4 {
            // Chunks 0 and 2 of groups 0 and 1, of groups 2 and 3; then chunks 1 and 3.
            let even01 = _mm512_shuffle_i32x4::<0x88>(s[k], s[4 + k]);
            let odd01 = _mm512_shuffle_i32x4::<0xdd>(s[k], s[4 + k]);
            let even23 = _mm512_shuffle_i32x4::<0x88>(s[8 + k], s[12 + k]);
            let odd23 = _mm512_shuffle_i32x4::<0xdd>(s[8 + k], s[12 + k]);
            out[k] = _mm512_shuffle_i32x4::<0x88>(even01, even23);
            out[8 + k] = _mm512_shuffle_i32x4::<0xdd>(even01, even23);
            out[4 + k] = _mm512_shuffle_i32x4::<0x88>(odd01, odd23);
            out[12 + k] = _mm512_shuffle_i32x4::<0xdd>(odd01, odd23);
        }
        out
    }

    /// [`first_words`] of sixteen keys of at most [`ONE_BLOCK_KEY`] bytes, one 512-bit
    /// register per state word. The message words are built in registers: each key's padded
    /// block as one register (a masked load of its bytes, the `0x80` marker and the length
    /// set under masks), then the sixteen blocks transposed into sixteen words of sixteen
    /// lanes. Written lane by lane into memory instead, every vector load of a word waits for
    /// sixteen small stores to reach the cache.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX-512F, AVX-512VL and AVX-512BW; every key is at most
    /// [`ONE_BLOCK_KEY`] bytes.
    #[target_feature(enable = "avx2,avx512f,avx512vl,avx512bw")]
    pub(super) unsafe fn first_words_wide(keys: &[&[u8]; WIDE_LANES]) -> [u32; WIDE_LANES] {
        use std::arch::x86_64::{
            _mm512_add_epi32 as add, _mm512_mask_set1_epi8, _mm512_mask_set1_epi32,
            _mm512_maskz_loadu_epi8, _mm512_rol_epi32 as rol, _mm512_set1_epi32 as set1,
            _mm512_storeu_si512, _mm512_ternarylogic_epi32 as tern,
        };
        macro_rules! f {
            ($b:expr, $c:expr, $d:expr) => {
                tern::<0xca>($b, $c, $d)
            };
        }
        macro_rules! g {
            ($b:expr, $c:expr, $d:expr) => {
                tern::<0xe4>($b, $c, $d)
            };
        }
        macro_rules! h {
            ($b:expr, $c:expr, $d:expr) => {
                tern::<0x96>($b, $c, $d)
            };
        }
        macro_rules! i {
            ($b:expr, $c:expr, $d:expr) => {
                tern::<0x39>($b, $c, $d)
            };
        }
        macro_rules! step {
            ($f:ident, $a:ident, $b:ident, $c:ident, $d:ident, $word:expr, $k:expr, $s:literal) => {
                let t = add(add($a, add($word, set1($k as i32))), $f!($b, $c, $d));
                $a = add($b, rol::<$s>(t));
            };
        }
        let m = transpose(std::array::from_fn(|l| {
            let key = keys[l];
            let len = key.len().min(ONE_BLOCK_KEY);
            // SAFETY: the mask selects the key's own bytes; a masked load neither reads nor
            // faults on the bytes it leaves out.
            let bytes = unsafe { _mm512_maskz_loadu_epi8((1u64 << len) - 1, key.as_ptr().cast()) };
            let marked = _mm512_mask_set1_epi8(bytes, 1u64 << len, 0x80u8 as i8);
            _mm512_mask_set1_epi32(marked, 1 << 14, (len * 8) as i32)
        }));
        let [mut a, mut b, mut c, mut d] = INIT.map(|x| set1(x as i32));
        rounds!(a, b, c, d, m);
        // Step 60 is the last to change `a` (61–63 change d, c and b).
        step!(i, a, b, c, d, m[4], K[60], 6);
        let mut out = [0u32; WIDE_LANES];
        // SAFETY: `out` is 64 writable bytes; unaligned store.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), add(a, set1(INIT[0] as i32))) };
        out
    }

    eight_lanes!(
        "avx2,avx512f,avx512vl",
        "The CPU must support AVX-512F and AVX-512VL."
    );
}

#[cfg(test)]
mod tests {
    use md5::{Digest, Md5};

    use super::*;

    /// The portable kernel and, where the CPU has them, AVX2 and AVX-512 (CI machines have
    /// AVX2: the test says which ran).
    fn kernels() -> Vec<Kernel> {
        let kernels = Kernel::available();
        eprintln!("md5x kernels tested: {kernels:?}");
        kernels
    }

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
            // Even rounds walk every length in every lane; odd rounds pick lengths at random:
            // groups mixing one- and two-block keys.
            let keys: Vec<Vec<u8>> = (0..LANES)
                .map(|lane| {
                    let len = if round % 2 == 0 {
                        (round * LANES + lane) % (MAX_KEY + 1)
                    } else {
                        usize::from(byte()) % (MAX_KEY + 1)
                    };
                    (0..len).map(|_| byte()).collect()
                })
                .collect();
            let refs: [&[u8]; LANES] = std::array::from_fn(|l| keys[l].as_slice());
            for kernel in kernels() {
                let got = carbon_positions(kernel, &refs);
                for (key, got) in keys.iter().zip(got) {
                    assert_eq!(got, Some(carbon(key)), "{kernel:?} {key:?}");
                }
            }
        }
    }

    /// Sixteen keys at once answer as two groups of eight, with and without a longer key.
    #[test]
    fn wide_groups_match_md5() {
        for round in 0..40usize {
            let keys: Vec<Vec<u8>> = (0..WIDE_LANES)
                .map(|lane| {
                    let len = (round * WIDE_LANES + lane * 7) % (ONE_BLOCK_KEY + 1);
                    let len = if round % 5 == 4 && lane == 9 {
                        MAX_KEY
                    } else {
                        len
                    };
                    (0..len).map(|i| (i * 31 + lane + round) as u8).collect()
                })
                .collect();
            let refs: [&[u8]; WIDE_LANES] = std::array::from_fn(|l| keys[l].as_slice());
            for kernel in kernels() {
                let got = carbon_positions_wide(kernel, &refs);
                for (key, got) in keys.iter().zip(got) {
                    assert_eq!(got, Some(carbon(key)), "{kernel:?} {key:?}");
                }
            }
        }
    }

    #[test]
    fn longer_keys_are_left_to_the_caller() {
        let long = [b'x'; MAX_KEY + 1];
        let mut keys: [&[u8]; LANES] = [b"a.b"; LANES];
        keys[3] = &long;
        for kernel in kernels() {
            let got = carbon_positions(kernel, &keys);
            assert_eq!(got[3], None);
            assert_eq!(got[0], Some(carbon(b"a.b")));
        }
    }
}
