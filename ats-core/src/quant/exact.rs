//! Exact re-encoding of K-quant blocks whose values already lie on a grid.
//!
//! ggml's scale searches are not idempotent: fed the dequantised values of
//! their own output, they often land on a different encoding (measured on
//! Gaussian data: 5 to 55% of blocks change, by up to 60% of the
//! quantisation error, and some blocks never settle). So after the search,
//! a block that does not decode back to its input exactly gets a second
//! chance here: if an encoding is found that decodes to the input bit for
//! bit, it is used instead. Values that lie on no grid (anything not made
//! by a dequantiser) fail the first cheap test, so ggml's bytes stay
//! untouched; dequantised K-quant blocks re-encode losslessly.
//!
//! Every K-quant element decodes as `(d * sc) * q - dmin * m` in f32 (the
//! formats without a min have `dmin * m = 0`), from an f16 `d` and `dmin`,
//! an integer scale `sc` and min `m` per sub-block, and an integer level `q`.
//! The search tries the super-scales of ggml's search first, then guesses
//! built on what a ggml-style encoder guarantees: the sub-block of largest
//! scale has the extreme scale (63, 15, -32 or -128) and the sub-block of
//! largest min the extreme min. Under given super-scales each sub-block's
//! scale follows from the spacing of its values.
//!
//! Limits: an encoding can be missed (then the block requantises like
//! ggml's, with a small drift), notably when the sub-block of largest min
//! holds a single value in Q4_K/Q5_K, or in very sparse blocks. The search is
//! bounded by a work budget, so inputs that look like a grid but are none
//! (two-valued or sparse rows) cost a bounded time: at worst the quantiser
//! runs at about a sixth of its usual speed.

use half::f16;

use crate::dtype::QK_K;

/// Elements checked, at most, per block before the search gives up.
const BUDGET: usize = 1 << 14;

/// The integer content of a K-quant block, before bit packing.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Parts<const NSUB: usize, const SUB: usize> {
    /// Super-scale of the scales (an f16 value).
    pub d: f32,
    /// Super-scale of the mins (an f16 value; 0 for formats without mins).
    pub dmin: f32,
    /// Integer scale of each sub-block.
    pub sc: [i32; NSUB],
    /// Integer min of each sub-block (0 for formats without mins).
    pub m: [i32; NSUB],
    /// Integer level of each element.
    pub q: [[i8; SUB]; NSUB],
}

/// The ranges a K-quant format allows.
pub(super) struct Grid {
    /// Levels, inclusive.
    pub q: (i32, i32),
    /// Sub-block scales, inclusive.
    pub sc: (i32, i32),
    /// Sub-block mins, inclusive, for formats that have them.
    pub m: Option<(i32, i32)>,
    /// The scale a ggml-style encoder gives the sub-block of largest scale.
    pub sc_top: i32,
    /// The min a ggml-style encoder gives the sub-block of largest min.
    pub m_top: i32,
}

/// One element as every K-quant dequantiser computes it.
#[inline]
fn decode(a: f32, q: i32, b: f32) -> f32 {
    a * q as f32 - b
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// `v` rounded to an integer (ties to even), inline rather than through
/// libm's `roundf` (x86-64 has no rounding instruction before SSE4.1); only
/// meaningful for `|v| < 2^22`, which every level, scale and min here is.
#[inline]
fn round(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

fn near_int(v: f32, tol: f32) -> bool {
    v.abs() < 4_194_304.0 && (v - round(v)).abs() <= tol
}

/// Packs `parts` into `block` and, if that does not decode back to `x`
/// exactly, replaces it by an exact encoding when one can be found.
pub(super) fn settle<const NSUB: usize, const SUB: usize, const B: usize>(
    x: &[f32; QK_K],
    parts: &Parts<NSUB, SUB>,
    grid: &Grid,
    block: &mut [u8; B],
    pack: fn(&Parts<NSUB, SUB>, &mut [u8; B]),
    dequantize: fn(&[u8; B], &mut [f32; QK_K]),
) {
    pack(parts, block);
    let mut y = [0.0f32; QK_K];
    dequantize(block, &mut y);
    if same_bits(&y, x) || !x.iter().all(|v| v.is_finite()) {
        return;
    }
    if let Some(exact) = Search::new(x, grid).and_then(|mut s| s.run(parts)) {
        let mut alt = [0u8; B];
        pack(&exact, &mut alt);
        dequantize(&alt, &mut y);
        // The format's own dequantiser has the last word.
        if same_bits(&y, x) {
            *block = alt;
        }
    }
}

/// What the search knows of one sub-block before any scale is guessed.
struct Span {
    lo: f32,
    hi: f32,
    /// The fewest level steps that put every value on an integer step of
    /// `(hi - lo) / k`; 0 for a sub-block holding a single value.
    k: i32,
}

struct Search<'a, const SUB: usize> {
    subs: &'a [[f32; SUB]],
    spans: Vec<Span>,
    /// Sub-blocks by decreasing number of level steps: the most telling
    /// first, so that wrong guesses fail early.
    order: Vec<usize>,
    g: &'a Grid,
    work: usize,
}

impl<'a, const SUB: usize> Search<'a, SUB> {
    /// `None` unless every sub-block lies on some evenly spaced grid, which
    /// values not made by a dequantiser almost never do.
    fn new(x: &'a [f32; QK_K], g: &'a Grid) -> Option<Self> {
        let (subs, _) = x.as_chunks::<SUB>();
        let spans = subs
            .iter()
            .map(|y| span(y, g.q.1 - g.q.0))
            .collect::<Option<Vec<_>>>()?;
        let mut order: Vec<usize> = (0..spans.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(spans[j].k));
        Some(Search {
            subs,
            order,
            spans,
            g,
            work: 0,
        })
    }

    /// An exact encoding: under the super-scales of `hint` (ggml's search on
    /// these values), else under the guessed ones, within the budget.
    fn run<const NSUB: usize>(&mut self, hint: &Parts<NSUB, SUB>) -> Option<Parts<NSUB, SUB>> {
        if let Some(p) = self.with_super(hint.d, hint.dmin, &hint.sc) {
            return Some(p);
        }
        let mut tried = vec![(hint.d, hint.dmin)];
        for d in self.d_guesses(hint.d) {
            let dmins = match self.g.m {
                Some(_) => self.dmin_guesses(d, hint.dmin),
                None => vec![0.0],
            };
            for dmin in dmins {
                if self.work > BUDGET {
                    return None;
                }
                if tried.contains(&(d, dmin)) {
                    continue;
                }
                tried.push((d, dmin));
                if let Some(p) = self.with_super(d, dmin, &hint.sc) {
                    return Some(p);
                }
            }
        }
        None
    }

    /// Every sub-block re-encoded under the super-scales `d` and `dmin`.
    fn with_super<const NSUB: usize>(
        &mut self,
        d: f32,
        dmin: f32,
        hint_sc: &[i32; NSUB],
    ) -> Option<Parts<NSUB, SUB>> {
        let mut p = Parts {
            d,
            dmin,
            sc: [0; NSUB],
            m: [0; NSUB],
            q: [[0; SUB]; NSUB],
        };
        for i in 0..NSUB {
            let j = self.order[i];
            let found = self
                .scales(j, d, dmin, hint_sc[j])
                .into_iter()
                .find_map(|sc| {
                    self.with_scale(j, d * sc as f32, dmin, &mut p.q[j])
                        .map(|m| (sc, m))
                });
            (p.sc[j], p.m[j]) = found?;
        }
        Some(p)
    }

    /// Candidate scales of sub-block `j` under `d` and `dmin`: the hint,
    /// then those whose step puts the values on integer levels.
    fn scales(&self, j: usize, d: f32, dmin: f32, hint: i32) -> Vec<i32> {
        let g = self.g;
        let in_range = |sc: i32| (g.sc.0..=g.sc.1).contains(&sc);
        let mut out = vec![hint];
        let mut push = |s: f32| {
            if near_int(s, 2e-3) {
                for sc in [round(s) as i32, -(round(s) as i32)] {
                    if in_range(sc) && !out.contains(&sc) {
                        out.push(sc);
                    }
                }
            }
        };
        let Span { lo, hi, k } = self.spans[j];
        if d == 0.0 {
            push(0.0);
        } else if k == 0 {
            // A single value v = d * sc * q - dmin * m: scale 0, or for each
            // min, every way of writing (v + dmin * m) / d as sc * q.
            push(0.0);
            let (m_hi, q_hi) = (g.m.map_or(0, |m| m.1), g.q.0.abs().max(g.q.1));
            for m in 0..=m_hi {
                let p = (lo + dmin * m as f32) / d;
                if !near_int(p, 2e-3) || p.abs() > (q_hi * g.sc.1.max(-g.sc.0)) as f32 {
                    continue;
                }
                let p = round(p) as i32;
                for q in 1..=q_hi {
                    if p % q == 0 {
                        push((p / q) as f32);
                    }
                }
            }
        } else {
            // The step is (hi - lo) / k' with k' a multiple of k.
            for k in (k..=g.q.1 - g.q.0).step_by(k as usize) {
                push((hi - lo) / (k as f32 * d.abs()));
            }
        }
        out
    }

    /// The min and levels of sub-block `j` if its step is `a`.
    fn with_scale(&mut self, j: usize, a: f32, dmin: f32, q: &mut [i8; SUB]) -> Option<i32> {
        let (g, y) = (self.g, &self.subs[j]);
        let fits = |v: i32| (g.q.0..=g.q.1).contains(&v);
        let min_for = |b: f32| match g.m {
            None => (b == 0.0).then_some(0),
            Some((lo, hi)) => {
                let m = if dmin != 0.0 { round(b / dmin) } else { 0.0 };
                (m >= lo as f32 && m <= hi as f32).then_some(m as i32)
            }
        };
        self.work += SUB;
        if a == 0.0 {
            // Every element is `(±0 * q) - dmin * m`: with a min, one value
            // throughout; without, zeros whose sign the level's sign flips.
            let m = min_for(-y[0])?;
            let b = dmin * m as f32;
            for (l, &t) in q.iter_mut().zip(y) {
                *l = [0, -1, 1]
                    .into_iter()
                    .find(|&v| fits(v) && decode(a, v, b).to_bits() == t.to_bits())?
                    as i8;
            }
            return Some(m);
        }
        if g.m.is_none() {
            for (l, &t) in q.iter_mut().zip(y) {
                let v = round(t / a);
                if !fits(v as i32) || decode(a, v as i32, 0.0).to_bits() != t.to_bits() {
                    return None;
                }
                *l = v as i8;
            }
            return Some(0);
        }
        // Levels relative to the first element from the differences (which
        // the min cancels out of), then each possible level of the first.
        let mut k = [0i32; SUB];
        let inv = 1.0 / a;
        for (k, &t) in k.iter_mut().zip(y) {
            let r = (t - y[0]) * inv;
            if !near_int(r, 1e-2) {
                return None;
            }
            *k = round(r) as i32;
        }
        let (kmin, kmax) = (*k.iter().min()?, *k.iter().max()?);
        for q0 in (g.q.0 - kmin)..=(g.q.1 - kmax) {
            let Some(m) = min_for(a * q0 as f32 - y[0]) else {
                continue;
            };
            let b = dmin * m as f32;
            self.work += 4;
            let exact = k
                .iter()
                .zip(y)
                .all(|(&ki, &t)| decode(a, q0 + ki, b).to_bits() == t.to_bits());
            if exact {
                for (l, &ki) in q.iter_mut().zip(&k) {
                    *l = (q0 + ki) as i8;
                }
                return Some(m);
            }
        }
        None
    }

    /// Guesses for `d`: each sub-block's step is `f * d * sc` for its
    /// smallest level spacing `f` and its scale `sc`, and the sub-block of
    /// largest step has the extreme scale; a guess survives if it divides
    /// every sub-block's step a whole number of times.
    fn d_guesses(&mut self, hint: f32) -> Vec<f32> {
        let g = self.g;
        let levels = g.q.1 - g.q.0;
        // Most levels first: their spacing is most likely the step itself.
        let mut spans: Vec<(f32, i32)> = self
            .spans
            .iter()
            .filter(|s| s.k > 0)
            .map(|s| ((s.hi - s.lo) / s.k as f32, s.k))
            .collect();
        spans.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.total_cmp(&a.0)));
        let most = (levels * g.sc.1.max(-g.sc.0)) as f32 + 0.5;
        let signs: &[i32] = if g.sc.0 < 0 { &[1, -1] } else { &[1] };
        let mut out = vec![hint];
        for &(a, k) in &spans {
            for f in 1..=levels / k {
                for &sign in signs {
                    if self.work > BUDGET {
                        return out;
                    }
                    self.work += 1;
                    let d = f16::from_f32(a / (f * sign * g.sc_top) as f32).to_f32();
                    if !d.is_finite() || d == 0.0 || out.contains(&d) {
                        continue;
                    }
                    let divides = spans.iter().all(|&(b, _)| {
                        let r = b / d.abs();
                        r <= most && near_int(r, 1e-3 + r * 1e-5)
                    });
                    if divides {
                        out.push(d);
                    }
                }
            }
        }
        out
    }

    /// Guesses for `dmin` under `d`: the search's own, zero, and each
    /// sub-block's offset taken to be the extreme min, for each level its
    /// lowest element could be on.
    fn dmin_guesses(&mut self, d: f32, hint: f32) -> Vec<f32> {
        let g = self.g;
        let mut out = vec![hint, 0.0];
        let mut push = |b: f32| {
            let dmin = f16::from_f32(b / g.m_top as f32).to_f32();
            if dmin.is_finite() && dmin > 0.0 && !out.contains(&dmin) {
                out.push(dmin);
            }
        };
        // A single value v = d * p - dmin * m for a product p = sc * q:
        // enumerated where the products are few (Q2_K).
        let products = g.q.1 * g.sc.1;
        for (j, span) in self.spans.iter().enumerate() {
            self.work += 1;
            if span.k == 0 {
                if products <= 64 {
                    (0..=products).for_each(|p| push(d * p as f32 - span.lo));
                }
                continue;
            }
            for sc in self.scales(j, d, 0.0, 0).into_iter().skip(1).take(2) {
                let a = d * sc as f32;
                let used = round((span.hi - span.lo) / a) as i32;
                for t in 0..=(g.q.1 - used) {
                    push(a * t as f32 - span.lo);
                }
            }
        }
        out
    }
}

/// Where the values of a sub-block lie, if on an evenly spaced grid of at
/// most `steps` steps.
fn span(y: &[f32], steps: i32) -> Option<Span> {
    let (lo, hi) = y
        .iter()
        .fold((y[0], y[0]), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    if lo == hi {
        return Some(Span { lo, hi, k: 0 });
    }
    (1..=steps)
        .find(|&k| {
            let a = (hi - lo) / k as f32;
            y.iter().all(|&t| near_int((t - lo) / a, 1e-2))
        })
        .map(|k| Span { lo, hi, k })
}
