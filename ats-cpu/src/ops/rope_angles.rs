//! The scaled cos and sin of every (row, rotation pair) of a RoPE call,
//! kept per thread for the next calls that ask for the same ones.
//!
//! A round's RoPE nodes (the queries and keys of every layer) rotate rows at
//! the same positions with the same frequencies: a SmolLM2 round of 8
//! decode tokens computed the same 8 x 32 angles 60 times, 2.7% of the
//! round on the thread that runs the small ops alone. A prompt's rows are
//! cut into chunks over the team, a few a thread, so a thread keeps its
//! last [`KEEP`] tables. A table is a memo: its key holds everything the
//! values depend on, so a hit gives the bits a recomputation would.

use std::borrow::Cow;
use std::cell::RefCell;

use ats_core::graph::{RopeKind, RopeSpec};
use ats_core::round::Positions;

/// Tables a thread keeps: more than the chunks of a prompt's rows one
/// thread takes ([`super::par`] cuts 4 a thread).
const KEEP: usize = 8;

/// What a table's values depend on: borrowed from a call, owned in a
/// kept table.
#[derive(PartialEq)]
struct Key<'a> {
    /// The spec with `n_heads` set to 0 (the heads rotated do not matter).
    spec: RopeSpec,
    /// The frequency divisors, if any.
    factors: Option<Cow<'a, [f32]>>,
    /// Position components of the rows.
    components: usize,
    /// The rows' positions (`components` a row).
    positions: Cow<'a, [i32]>,
}

impl Key<'_> {
    /// The key with its slices copied, to keep.
    fn owned(self) -> Key<'static> {
        Key {
            factors: self.factors.map(|f| Cow::Owned(f.into_owned())),
            positions: Cow::Owned(self.positions.into_owned()),
            ..self
        }
    }
}

/// A table and its key.
struct Table {
    key: Key<'static>,
    /// `cs[row * n_pairs + i]`: pair `i`'s `(cos, sin)` times the spec's
    /// magnitude scale.
    cs: Vec<(f32, f32)>,
}

thread_local! {
    /// The tables this thread built last, the newest at the end.
    static KEPT: RefCell<Vec<Table>> = const { RefCell::new(Vec::new()) };
}

/// Rotation pairs a head of `spec` has.
pub(super) fn n_pairs(spec: &RopeSpec) -> usize {
    match spec.kind {
        RopeKind::Vision2d => spec.head_dim / 2,
        _ => spec.rot_dim / 2,
    }
}

/// Calls `f` with the `(cos, sin)` table (`rows x n_pairs(spec)`) of rows
/// `first..first + rows` of `positions`.
pub(super) fn with_angles<R>(
    spec: &RopeSpec,
    positions: &Positions,
    (first, rows): (usize, usize),
    freq_factors: Option<&[f32]>,
    f: impl FnOnce(&[(f32, f32)]) -> R,
) -> R {
    let comps = positions.components;
    let asked = Key {
        spec: RopeSpec {
            n_heads: 0,
            ..*spec
        },
        factors: freq_factors.map(Cow::Borrowed),
        components: comps,
        positions: Cow::Borrowed(&positions.data[first * comps..(first + rows) * comps]),
    };
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        match kept.iter().position(|t| t.key == asked) {
            Some(i) => {
                let hit = kept.remove(i);
                kept.push(hit);
            }
            None => {
                if kept.len() == KEEP {
                    kept.remove(0);
                }
                let cs = compute(spec, positions, (first, rows), freq_factors);
                kept.push(Table {
                    key: asked.owned(),
                    cs,
                });
            }
        }
        f(kept.last().map_or(&[][..], |t| &t.cs[..]))
    })
}

/// The table of [`with_angles`], computed.
fn compute(
    spec: &RopeSpec,
    positions: &Positions,
    (first, rows): (usize, usize),
    freq_factors: Option<&[f32]>,
) -> Vec<(f32, f32)> {
    let sources: Vec<(usize, f32)> = (0..n_pairs(spec))
        .map(|i| {
            let (c, j) = spec.pair_source(i);
            let mut inv = spec.inv_freq(j);
            if let Some(f) = freq_factors {
                inv /= f[j];
            }
            // text rounds of an M-RoPE model may carry one component only
            let c = if positions.components > c { c } else { 0 };
            (c, inv)
        })
        .collect();
    let mscale = spec.mscale();
    let mut cs = Vec::with_capacity(rows * sources.len());
    for r in first..first + rows {
        cs.extend(sources.iter().map(|&(c, inv)| {
            let angle = positions.get(r, c) as f32 * inv;
            (angle.cos() * mscale, angle.sin() * mscale)
        }));
    }
    cs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(theta: f32) -> RopeSpec {
        RopeSpec {
            kind: RopeKind::Neox,
            n_heads: 2,
            head_dim: 8,
            rot_dim: 8,
            theta,
            yarn: None,
        }
    }

    fn table(s: &RopeSpec, p: &Positions, rows: (usize, usize), f: Option<&[f32]>) -> Vec<u64> {
        with_angles(s, p, rows, f, |cs| {
            cs.iter()
                .map(|&(c, s)| (u64::from(c.to_bits()) << 32) | u64::from(s.to_bits()))
                .collect()
        })
    }

    #[test]
    fn a_kept_table_is_only_reused_for_what_it_was_built_for() {
        let p = Positions::linear(5, 4);
        let s = spec(10000.0);
        let fresh = |s: &RopeSpec, p: &Positions, rows, f| {
            KEPT.with(|k| k.borrow_mut().clear());
            table(s, p, rows, f)
        };
        let base = fresh(&s, &p, (0, 4), None);
        assert_eq!(base.len(), 4 * 4);
        // the same call again, and with other heads: the kept table
        assert_eq!(table(&s, &p, (0, 4), None), base);
        let heads = RopeSpec { n_heads: 9, ..s };
        assert_eq!(table(&heads, &p, (0, 4), None), base);
        assert_eq!(KEPT.with(|k| k.borrow().len()), 1, "hits build nothing");
        // anything else it depends on gives a new table, as if computed fresh
        let p2 = Positions::linear(6, 4);
        let s2 = spec(500000.0);
        let factors = [1.0, 2.0, 4.0, 8.0];
        let others = [
            (&s, &p2, (0, 4), None),
            (&s2, &p, (0, 4), None),
            (&s, &p, (0, 4), Some(&factors[..])),
            (&s, &p, (1, 3), None),
        ];
        for (s, p, rows, f) in others {
            let got = table(s, p, rows, f);
            assert_ne!(got, base);
            assert_eq!(got, fresh(s, p, rows, f));
        }
        assert_eq!(table(&s, &p, (1, 3), None), base[4..]);
    }

    #[test]
    fn a_thread_keeps_its_last_tables() {
        let s = spec(10000.0);
        KEPT.with(|k| k.borrow_mut().clear());
        let ps: Vec<Positions> = (0..=KEEP).map(|i| Positions::linear(i * 10, 2)).collect();
        for p in &ps[..KEEP] {
            table(&s, p, (0, 2), None);
        }
        // a hit makes the oldest the newest, so the next miss drops the second
        table(&s, &ps[0], (0, 2), None);
        table(&s, &ps[KEEP], (0, 2), None);
        let firsts: Vec<i32> =
            KEPT.with(|k| k.borrow().iter().map(|t| t.key.positions[0]).collect());
        assert_eq!(firsts.len(), KEEP);
        assert!(firsts.contains(&0) && !firsts.contains(&10));
        assert_eq!(firsts.last(), Some(&(KEEP as i32 * 10)));
    }
}
