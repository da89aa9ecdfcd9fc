//! Hashing metric names for in-memory maps (route cache, list verdicts, tag memo): xxh3 with a
//! random seed per map.

use std::hash::{BuildHasher, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Hashes a name with xxh3, seeded per cache so that names crafted to collide in one process
/// do not collide in another.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameHashBuilder {
    seed: u64,
}

impl NameHashBuilder {
    /// A builder with a fresh random seed.
    pub(crate) fn random() -> Self {
        Self {
            seed: fastrand::u64(..),
        }
    }
}

impl BuildHasher for NameHashBuilder {
    type Hasher = NameHasher;

    #[inline]
    fn build_hasher(&self) -> NameHasher {
        NameHasher { state: self.seed }
    }
}

/// `[u8]`'s `Hash` writes a length then the bytes; xxh3 covers the bytes in one call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameHasher {
    state: u64,
}

impl Hasher for NameHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.state
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.state = xxh3_64_with_seed(bytes, self.state);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        // The length prefix: cheap mixing, xxh3 of the bytes follows.
        self.state = (self.state ^ n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}
