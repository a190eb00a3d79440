//! An op's output cut over the current team. Only large outputs (prompt
//! rounds) are cut, into whole units (rows, groups), and every chunk is
//! computed exactly as in one pass over the whole, so the results do not
//! depend on the thread count.

use ats_core::graph::RopeSpec;
use ats_core::round::Positions;

use super::{elementwise, norm, rope};
use crate::team;

/// Outputs below this many values run on the calling thread: below it the
/// fork costs more than the work.
const PAR_MIN: usize = 1 << 15;

/// Chunks per thread: a few, so that a late thread's share is small.
const CHUNKS_PER_THREAD: usize = 4;

/// Calls `f(first, chunk)` for `out` cut into chunks of whole units of
/// `unit` values (`first`: the chunk's first unit), on the current team
/// when `out` is large; otherwise once, with the whole of `out`.
pub(crate) fn chunks(out: &mut [f32], unit: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let threads = team::current_threads();
    let units = out.len() / unit.max(1);
    if threads < 2 || out.len() < PAR_MIN || units < 2 {
        return f(0, out);
    }
    let per = units.div_ceil(CHUNKS_PER_THREAD * threads);
    team::for_each_chunk_mut(out, per * unit, |i, c| f(i * per, c));
}

/// [`norm::rms_norm`], cut by groups.
pub(crate) fn rms_norm(x: &[f32], w: &[f32], out: &mut [f32], group: usize, eps: f32) {
    chunks(out, group, |g0, o| {
        norm::rms_norm(&x[g0 * group..g0 * group + o.len()], w, o, group, eps)
    });
}

/// [`elementwise::swiglu`], cut anywhere: every element takes the same path
/// wherever it lies.
pub(crate) fn swiglu(gate: &[f32], up: &[f32], out: &mut [f32]) {
    const UNIT: usize = 64;
    chunks(out, UNIT, |c0, o| {
        let at = UNIT * c0..UNIT * c0 + o.len();
        elementwise::swiglu(&gate[at.clone()], &up[at], o)
    });
}

/// `out = x` with [`rope::rope`] applied, cut by rows.
pub(crate) fn rope(
    x: &[f32],
    out: &mut [f32],
    spec: &RopeSpec,
    positions: &Positions,
    freq_factors: Option<&[f32]>,
) {
    let width = spec.n_heads * spec.head_dim;
    chunks(out, width, |r0, o| {
        o.copy_from_slice(&x[r0 * width..r0 * width + o.len()]);
        rope::rope_rows(o, r0, spec, positions, freq_factors);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_in_one_chunk_that_knows_where_it_starts() {
        let team = team::Team::new(2, "par-test").unwrap();
        for (len, unit) in [
            (100, 10),
            (PAR_MIN, 576),
            (PAR_MIN * 3 + 7, 64),
            (PAR_MIN * 2, 1),
        ] {
            let mut out = vec![0f32; len];
            team.install(|| {
                chunks(&mut out, unit, |first, c| {
                    assert!(c.len() % unit == 0 || first * unit + c.len() == len);
                    for (i, v) in c.iter_mut().enumerate() {
                        *v += (first * unit + i) as f32;
                    }
                })
            });
            assert!(
                out.iter().enumerate().all(|(i, &v)| v == i as f32),
                "{len} {unit}"
            );
        }
    }

    fn values(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + seed) * 0.377).sin() * 3.0)
            .collect()
    }

    #[test]
    fn ops_cut_over_two_threads_give_the_one_pass_bits() {
        use ats_core::graph::RopeKind;
        let team = team::Team::new(2, "par-test").unwrap();
        let (rows, width) = (97, 576);
        let x = values(rows * width, 0.5);
        let (w, up) = (values(width, 1.5), values(rows * width, 2.5));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let cut = |f: &dyn Fn(&mut [f32])| {
            let mut out = vec![0f32; rows * width];
            team.install(|| f(&mut out));
            out
        };

        let mut one = vec![0f32; rows * width];
        for group in [width, 64] {
            norm::rms_norm(&x, &w, &mut one, group, 1e-5);
            let par = cut(&|o| rms_norm(&x, &w, o, group, 1e-5));
            assert_eq!(bits(&par), bits(&one), "rms_norm, groups of {group}");
        }
        elementwise::swiglu(&x, &up, &mut one);
        assert_eq!(bits(&cut(&|o| swiglu(&x, &up, o))), bits(&one), "swiglu");

        let spec = RopeSpec {
            kind: RopeKind::Neox,
            n_heads: 9,
            head_dim: 64,
            rot_dim: 64,
            theta: 10000.0,
            yarn: None,
        };
        let positions = Positions::linear(5, rows);
        one.copy_from_slice(&x);
        rope::rope(&mut one, &spec, &positions, None);
        let par = cut(&|o| rope(&x, o, &spec, &positions, None));
        assert_eq!(bits(&par), bits(&one), "rope");
    }
}
