//! A name's walk of the routes, kept as bytes so that the next line with that name skips it.
//!
//! Matching a line against a configuration's expressions is where carbon-c-relay spends its
//! time (glibc's `regexec`, once per expression tried), and it depends on the name alone: the
//! routes see the name up to its first space, rewrites change only the name, and the clusters
//! pick members by the name. So the outcome of one walk — the name's variants (as each
//! rewrite left it when a cluster took a copy), which member gets which variant and how it was
//! picked, and the aggregators' output names — holds for every line with that name, whatever
//! its value and timestamp. A *plan* stores that outcome in the relay's name cache
//! ([`crate::name_cache::NameCache`], bounded in bytes); [`replay`] rebuilds the walk's
//! [`Routed`] from it and the line's own value and timestamp.
//!
//! Four things make a walk depend on more than the name; [`encode`] refuses such walks (but
//! the third), so they are walked every time:
//! - a `validate` reads the text after the name;
//! - a `file ip` cluster writes the sender's address before the line;
//! - members that are down (or full with nothing to spill to): `any_of`, `failover` and
//!   `dynamic` rings pick by who can take the line, so a plan keeps how each member was
//!   picked ([`Pick`]) and [`replay`] picks again;
//! - the length of the line: a rewrite that does not fit carbon-c-relay's 32 KiB buffer is
//!   skipped. A walk with such a rewrite is not kept; one without fits every line whose text
//!   after the name is no longer than the walked line's, so the plan records that length and
//!   [`replay`] refuses longer lines (the walk then runs and keeps the longer length).
//!
//! Layout (integers little-endian): the longest text after the name (u16), blackholed (u8);
//! the variants (u16 count; each a u16 length and the name's bytes); the sends (u16 count;
//! each the variant (u16) and the pick: a kind byte, a cluster or server (u16), a hash (u32),
//! a ring member (u16)); the aggregators' datapoints (u16 count; each the aggregator and the
//! compute (u32 each), a u16 length and the output name's bytes).

use super::Program;
use super::route::{AggregateHit, Env, Pick, Routed, value_and_epoch};

/// The walk in `routed` of the line `line` (name up to `firstspace`) as a plan, into `out`;
/// false when the walk cannot be kept (see the module documentation).
pub(crate) fn encode(routed: &Routed, line: &[u8], firstspace: usize, out: &mut Vec<u8>) -> bool {
    out.clear();
    if routed.read_rest || routed.overflowed || routed.read_client || routed.validation_logs > 0 {
        return false;
    }
    let rest = line.get(firstspace..).unwrap_or_default();
    // A line carbon-c-relay would not aggregate (no timestamp) says nothing of those that do.
    if value_and_epoch(line, firstspace).is_none() {
        return false;
    }
    let Ok(longest) = u16::try_from(rest.len()) else {
        return false;
    };
    let Ok(variants) = u16::try_from(routed.variants.len()) else {
        return false;
    };
    out.extend_from_slice(&longest.to_le_bytes());
    out.push(u8::from(routed.blackholed));
    out.extend_from_slice(&variants.to_le_bytes());
    for &(s, e, name) in &routed.variants {
        // Every variant is a name followed by the line's own text after the name.
        let (Some(head), Some(tail)) =
            (routed.lines.get(s..s + name), routed.lines.get(s + name..e))
        else {
            return false;
        };
        if tail != rest || !put_bytes(out, head) {
            return false;
        }
    }
    let Ok(sends) = u16::try_from(routed.sends.len()) else {
        return false;
    };
    out.extend_from_slice(&sends.to_le_bytes());
    for (&(variant, _), pick) in routed.sends.iter().zip(&routed.picks) {
        let Ok(variant) = u16::try_from(variant) else {
            return false;
        };
        let (kind, id, hash, member) = match *pick {
            Pick::Fixed { server } => (0u8, server, 0u32, 0u16),
            Pick::AnyOf { cluster, hash } => (1, cluster, hash, 0),
            Pick::Failover { cluster } => (2, cluster, 0, 0),
            Pick::Dynamic {
                cluster,
                hash,
                member,
            } => (3, cluster, hash, member),
        };
        out.extend_from_slice(&variant.to_le_bytes());
        out.push(kind);
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&hash.to_le_bytes());
        out.extend_from_slice(&member.to_le_bytes());
    }
    let Ok(aggregates) = u16::try_from(routed.aggregates.len()) else {
        return false;
    };
    out.extend_from_slice(&aggregates.to_le_bytes());
    for hit in &routed.aggregates {
        out.extend_from_slice(&hit.aggregator.to_le_bytes());
        out.extend_from_slice(&hit.compute.to_le_bytes());
        if !put_bytes(out, routed.aggregate_name(hit)) {
            return false;
        }
    }
    true
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    let Ok(len) = u16::try_from(bytes.len()) else {
        return false;
    };
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
    true
}

/// Reads a plan front to back; `None` past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// The walk of `line` (name up to `firstspace`) rebuilt from `plan` into `out`, the members
/// picked again as they are now; false when the plan does not hold for this line (its text
/// after the name is longer than the plan's) or is not a plan: the line is then walked.
pub(crate) fn replay(
    plan: &[u8],
    program: &Program,
    line: &[u8],
    firstspace: usize,
    env: &Env<'_>,
    out: &mut Routed,
) -> bool {
    out.clear();
    replay_into(plan, program, line, firstspace, env, out).is_some()
}

fn replay_into(
    plan: &[u8],
    program: &Program,
    line: &[u8],
    firstspace: usize,
    env: &Env<'_>,
    out: &mut Routed,
) -> Option<()> {
    let rest = line.get(firstspace..)?;
    let mut r = Reader(plan);
    if rest.len() > usize::from(r.u16()?) {
        return None;
    }
    out.blackholed = r.u8()? != 0;
    let input = line.get(..firstspace)?;
    for _ in 0..r.u16()? {
        let name = r.bytes()?;
        if name == input && out.input_variant.is_none() {
            // The line itself: not copied.
            out.input_variant = Some(out.variants.len() as u32);
            out.variants.push((0, 0, name.len()));
            continue;
        }
        let start = out.lines.len();
        out.lines.extend_from_slice(name);
        out.lines.extend_from_slice(rest);
        out.variants.push((start, out.lines.len(), name.len()));
    }
    for _ in 0..r.u16()? {
        let variant = r.u16()?;
        let kind = r.u8()?;
        let id = r.u16()?;
        let hash = r.u32()?;
        let member = r.u16()?;
        let pick = match kind {
            0 => Pick::Fixed { server: id },
            1 => Pick::AnyOf { cluster: id, hash },
            2 => Pick::Failover { cluster: id },
            3 => Pick::Dynamic {
                cluster: id,
                hash,
                member,
            },
            _ => return None,
        };
        if usize::from(variant) >= out.variants.len() {
            return None;
        }
        if let Some(server) = program.pick(pick, env) {
            out.send(u32::from(variant), server, pick);
        }
    }
    let aggregates = r.u16()?;
    let value = if aggregates > 0 {
        value_and_epoch(line, firstspace)
    } else {
        None
    };
    for _ in 0..aggregates {
        let aggregator = r.u32()?;
        let compute = r.u32()?;
        let name = r.bytes()?;
        if let Some((value, epoch)) = value {
            let start = out.names.len();
            out.names.extend_from_slice(name);
            out.aggregates.push(AggregateHit {
                aggregator,
                compute,
                name: (start, out.names.len()),
                value,
                epoch,
            });
        }
    }
    Some(())
}
