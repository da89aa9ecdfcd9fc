//! The values the percentile methods keep: every open interval's, in one store of
//! cache-line blocks chained per interval, reused as intervals are freed.
//!
//! A value goes into its interval's last block; a new block comes from the free list or the
//! end of the store (one vector, which rarely grows), so an interval costs no allocation or
//! reallocation of its own; a freed interval's blocks go back to the free list whole. An
//! emission copies the chain into the scratch buffer it sorts anyway.
//!
//! A block is one cache line: [`PER_BLOCK`] values, how many it holds and the next block.
//! The store does not shrink: freed blocks wait on the free list for the next intervals; the
//! aggregator's `max_values` bounds what it holds.

/// Values per block (a block is one 64-byte line).
const PER_BLOCK: usize = 7;

/// No block.
const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Block {
    values: [f64; PER_BLOCK],
    len: u32,
    next: u32,
}

const EMPTY: Block = Block {
    values: [0.0; PER_BLOCK],
    len: 0,
    next: NONE,
};

/// One interval's values in a [`ValueStore`]: its first and last block and how many values.
/// Not `Clone`: a chain owns its blocks until [`ValueStore::release`].
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Chain {
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for Chain {
    fn default() -> Self {
        Self {
            head: NONE,
            tail: NONE,
            len: 0,
        }
    }
}

impl Chain {
    /// Values held.
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }
}

/// Every interval's values. See the module documentation.
#[derive(Debug)]
pub(super) struct ValueStore {
    blocks: Vec<Block>,
    /// First free block, chained by `next`.
    free: u32,
}

impl Default for ValueStore {
    fn default() -> Self {
        Self {
            blocks: Vec::new(),
            free: NONE,
        }
    }
}

impl ValueStore {
    /// An empty store with room for `values` values without growing.
    pub(super) fn with_capacity(values: usize) -> Self {
        Self {
            blocks: Vec::with_capacity(values.div_ceil(PER_BLOCK)),
            free: NONE,
        }
    }

    /// Appends `value` to `chain`.
    #[inline]
    pub(super) fn push(&mut self, chain: &mut Chain, value: f64) {
        let full = self
            .blocks
            .get(chain.tail as usize)
            .is_none_or(|b| b.len as usize >= PER_BLOCK);
        if full {
            let Some(block) = self.take() else {
                return;
            };
            match self.blocks.get_mut(chain.tail as usize) {
                Some(tail) => tail.next = block,
                None => chain.head = block,
            }
            chain.tail = block;
        }
        if let Some(tail) = self.blocks.get_mut(chain.tail as usize)
            && let Some(slot) = tail.values.get_mut(tail.len as usize)
        {
            *slot = value;
            tail.len += 1;
            chain.len += 1;
        }
    }

    /// An empty block, from the free list or new; `None` past `u32` blocks.
    fn take(&mut self) -> Option<u32> {
        if let Some(b) = self.blocks.get_mut(self.free as usize) {
            let id = self.free;
            self.free = b.next;
            *b = EMPTY;
            return Some(id);
        }
        let id = u32::try_from(self.blocks.len())
            .ok()
            .filter(|&id| id != NONE)?;
        self.blocks.push(EMPTY);
        Some(id)
    }

    /// Appends `chain`'s values, in arrival order, to `out`.
    pub(super) fn extend_into(&self, chain: &Chain, out: &mut Vec<f64>) {
        let mut at = chain.head;
        while let Some(b) = self.blocks.get(at as usize) {
            out.extend_from_slice(b.values.get(..b.len as usize).unwrap_or_default());
            if at == chain.tail {
                break;
            }
            at = b.next;
        }
    }

    /// Gives `chain`'s blocks back and empties it.
    pub(super) fn release(&mut self, chain: &mut Chain) {
        if let Some(tail) = self.blocks.get_mut(chain.tail as usize) {
            tail.next = self.free;
            self.free = chain.head;
        }
        *chain = Chain::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_keep_arrival_order_and_reuse_freed_blocks() {
        let mut store = ValueStore::default();
        let (mut a, mut b) = (Chain::default(), Chain::default());
        for i in 0..20 {
            store.push(&mut a, i as f64);
            if i % 2 == 0 {
                store.push(&mut b, -(i as f64));
            }
        }
        let read = |store: &ValueStore, c: &Chain| {
            let mut out = Vec::new();
            store.extend_into(c, &mut out);
            out
        };
        assert_eq!(
            read(&store, &a),
            (0..20).map(|i| i as f64).collect::<Vec<_>>()
        );
        assert_eq!(a.len(), 20);
        assert_eq!(read(&store, &b).len(), 10);
        let blocks = store.blocks.len();
        assert_eq!(blocks, 3 + 2);
        store.release(&mut a);
        assert_eq!((a.len(), read(&store, &a)), (0, vec![]));
        let mut c = Chain::default();
        for i in 0..21 {
            store.push(&mut c, i as f64);
        }
        assert_eq!(store.blocks.len(), blocks, "the freed blocks are reused");
        assert_eq!(
            read(&store, &c),
            (0..21).map(|i| i as f64).collect::<Vec<_>>()
        );
        assert_eq!(
            read(&store, &b),
            (0..10).map(|i| -(2 * i) as f64).collect::<Vec<_>>()
        );
        assert_eq!(std::mem::size_of::<Block>(), 64);
    }
}
