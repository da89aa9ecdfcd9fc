//! carbon-c-relay's rule optimiser (`router_optimise`), step for step.
//!
//! With at least `threshold` routes (`-O`, default 50), each route's expression is reduced to
//! its *block*: the last run of letters and `_` (at most 64), after trailing other characters
//! and whole parenthesised groups are skipped. Routes with the same block (three letters or
//! more) collect into one block, in file order, until a `*` route, a rewrite or a route
//! without a usable block closes the window; a `stop` route joining a block moves that block
//! behind the others and closes the window too. Blocks of three or more routes become a
//! *group*: a route that enters its routes only when the name contains the block. Blocks are
//! then emitted in list order — which, after a move, is not the file order.
//!
//! The port keeps carbon-c-relay's linked-list moves as they are (including the `prev` links
//! it does not update), so the order that results is the order carbon-c-relay produces.

use std::sync::Arc;

use super::{Dest, Dests, Matcher, Route};

/// One block: a run of routes (`first..=last` in `routes` order, linked by `next_route`).
struct Block {
    pattern: Option<Vec<u8>>,
    hash: i64,
    refcnt: usize,
    seqnr: usize,
    routes: Vec<usize>,
    prev: Option<usize>,
    next: Option<usize>,
}

/// The block of `pattern`: its last run of `[a-zA-Z_]` (reversed, at most 64) after
/// trailing characters and parenthesised groups; `None` when nothing is left.
fn block_of(pattern: &[u8]) -> Option<Vec<u8>> {
    let alpha = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    // `p` starts at the terminating NUL.
    let mut p = pattern.len() as isize;
    let at = |p: isize| -> u8 {
        if p >= 0 && (p as usize) < pattern.len() {
            pattern[p as usize]
        } else {
            0
        }
    };
    let mut depth: i64 = 0;
    while p > 0 && (depth != 0 || !alpha(at(p))) {
        let c = at(p);
        if c == b')' || c == b'(' {
            let mut escaped = false;
            p -= 1;
            while p > 0 && at(p) == b'\\' {
                escaped = !escaped;
                p -= 1;
            }
            if !escaped {
                depth += if c == b')' { 1 } else { -1 };
            }
            continue;
        }
        p -= 1;
    }
    if p == 0 {
        return None;
    }
    let mut block = Vec::new();
    while p >= 0 && block.len() < 64 && alpha(at(p)) {
        block.push(at(p));
        p -= 1;
    }
    Some(block)
}

/// Applies the optimiser to `routes` when there are at least `threshold` of them
/// (`None`: never, carbon-c-relay's `-O -1`).
pub(crate) fn optimise(routes: Vec<Route>, threshold: Option<usize>) -> Vec<Route> {
    let Some(threshold) = threshold else {
        return routes;
    };
    if routes.len() < threshold {
        return routes;
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut seq = 0usize;
    let new_block = |blocks: &mut Vec<Block>, b: Block| {
        blocks.push(b);
        blocks.len() - 1
    };
    let head = new_block(
        &mut blocks,
        Block {
            pattern: None,
            hash: 0,
            refcnt: 0,
            seqnr: seq,
            routes: Vec::new(),
            prev: None,
            next: None,
        },
    );
    seq += 1;
    let mut blast = head;
    let mut bstart: Option<usize> = Some(head);
    // Only the stop case sets it, and it is compared with a block by the original (a route's
    // whole pattern against a reversed block).
    let mut rlast: Option<usize> = None;
    let append = |blocks: &mut Vec<Block>, blast: &mut usize, b: Block| {
        let i = new_block(blocks, b);
        blocks[*blast].next = Some(i);
        blocks[i].prev = Some(*blast);
        *blast = i;
        i
    };
    for (ri, r) in routes.iter().enumerate() {
        let own = matches!(r.matcher, Matcher::All)
            || matches!(r.dests.list.first(), Some(Dest::Rewrite(_)));
        let block = if own {
            None
        } else {
            r.pattern.as_deref().and_then(|p| block_of(p.as_bytes()))
        };
        let usable = block.as_ref().is_some_and(|b| b.len() >= 3);
        if !usable {
            let i = append(
                &mut blocks,
                &mut blast,
                Block {
                    pattern: None,
                    hash: 0,
                    refcnt: 1,
                    seqnr: seq,
                    routes: vec![ri],
                    prev: None,
                    next: None,
                },
            );
            seq += 1;
            bstart = Some(i);
            rlast = None;
            continue;
        }
        let b = block.unwrap_or_default();
        let bsum: i64 = b.iter().map(|&c| i64::from(c)).sum();
        let mut found = None;
        let mut w = bstart;
        while let Some(i) = w {
            if blocks[i].hash == bsum && blocks[i].pattern.as_deref() == Some(b.as_slice()) {
                found = Some(i);
                break;
            }
            w = blocks[i].next;
        }
        let Some(bw) = found else {
            append(
                &mut blocks,
                &mut blast,
                Block {
                    pattern: Some(b),
                    hash: bsum,
                    refcnt: 1,
                    seqnr: seq,
                    routes: vec![ri],
                    prev: None,
                    next: None,
                },
            );
            if r.stop {
                bstart = None;
                rlast = None;
                seq += 1;
            }
            continue;
        };
        blocks[bw].refcnt += 1;
        blocks[bw].routes.push(ri);
        let rlast_matches = rlast
            .is_none_or(|l| routes[l].pattern.as_deref().map(str::as_bytes) == Some(b.as_slice()));
        if rlast_matches {
            if r.stop {
                if let Some(after) = blocks[bw].next {
                    // `bwalk->prev->next = bwalk->next`, prev links left as they were.
                    if let Some(prev) = blocks[bw].prev {
                        blocks[prev].next = Some(after);
                    }
                    blocks[blast].next = Some(bw);
                    blast = bw;
                    blocks[bw].next = None;
                }
                rlast = Some(ri);
                bstart = None;
                seq += 1;
            }
        } else {
            bstart = Some(blast);
            rlast = None;
            seq += 1;
        }
    }
    // The first (empty) block goes to the end as a sentinel with the last sequence number.
    blocks[blast].next = Some(head);
    let first = blocks[head].next;
    blocks[head].next = None;
    blocks[head].seqnr = seq;

    let mut slots: Vec<Option<Route>> = routes.into_iter().map(Some).collect();
    let mut out = Vec::new();
    let mut seq = 1usize;
    let mut w = first;
    while let Some(i) = w {
        let b = &blocks[i];
        if b.seqnr > seq {
            seq += 1;
            continue;
        }
        if b.seqnr < seq {
            // carbon-c-relay gives up here ("routes optimisation lost track"), keeping the
            // routes emitted so far.
            return out;
        }
        w = b.next;
        if b.refcnt == 0 {
            continue;
        }
        let taken: Vec<Route> = b.routes.iter().filter_map(|&r| slots[r].take()).collect();
        if b.refcnt < 3 {
            out.extend(taken);
        } else {
            let reversed =
                String::from_utf8_lossy(b.pattern.as_deref().unwrap_or_default()).into_owned();
            out.push(Route {
                pattern: None,
                matcher: Matcher::Contains(Vec::new()),
                nmatch: 0,
                dests: Arc::new(Dests {
                    list: vec![Dest::Group {
                        reversed,
                        routes: taken,
                    }],
                }),
                stop: false,
                masq: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_the_last_letters_past_groups_and_punctuation() {
        let rev = |p: &str| block_of(p.as_bytes()).map(|b| String::from_utf8(b).expect("ascii"));
        assert_eq!(rev("^sys\\.foo\\.bar$").as_deref(), Some("rab"));
        assert_eq!(
            rev("dothework.(foo|bar)\\.(.+)").as_deref(),
            Some("krowehtod")
        );
        assert_eq!(rev("(foo|bar)\\.(.+)"), None);
        assert_eq!(rev("^a\\.b_c[0-9]+").as_deref(), Some("c_b"));
    }
}
