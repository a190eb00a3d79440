//! Rotary position embeddings: normal (adjacent pairs), NeoX (halves),
//! multimodal sections (Qwen2-VL text) and 2D vision (Qwen2-VL encoder).

use ats_core::graph::{RopeKind, RopeSpec};
use ats_core::round::Positions;

use super::rope_angles;

/// Applies RoPE in place to `x` (`rows x n_heads*head_dim`), row `r` at `positions` row `r`.
/// `freq_factors` divide each pair's angle (Llama 3).
pub fn rope(x: &mut [f32], spec: &RopeSpec, positions: &Positions, freq_factors: Option<&[f32]>) {
    rope_rows(x, 0, spec, positions, freq_factors)
}

/// [`rope`] on rows `first..` of a round: `x`'s row `r` at `positions` row
/// `first + r`.
pub fn rope_rows(
    x: &mut [f32],
    first: usize,
    spec: &RopeSpec,
    positions: &Positions,
    freq_factors: Option<&[f32]>,
) {
    let width = spec.n_heads * spec.head_dim;
    let half = rope_angles::n_pairs(spec);
    let rows = x.len() / width.max(1);
    rope_angles::with_angles(spec, positions, (first, rows), freq_factors, |table| {
        for (row, cs) in x
            .chunks_exact_mut(width)
            .zip(table.chunks_exact(half.max(1)))
        {
            for head in row.chunks_exact_mut(spec.head_dim) {
                rotate(head, cs, spec.kind);
            }
        }
    })
}

/// Rotates one head's pairs by their `(cos, sin)`.
fn rotate(head: &mut [f32], cs: &[(f32, f32)], kind: RopeKind) {
    let half = cs.len();
    match kind {
        RopeKind::Normal => {
            for (i, &(cos, sin)) in cs.iter().enumerate() {
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * cos - b * sin;
                head[2 * i + 1] = a * sin + b * cos;
            }
        }
        _ => {
            for (i, &(cos, sin)) in cs.iter().enumerate() {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos - b * sin;
                head[i + half] = a * sin + b * cos;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: RopeKind) -> RopeSpec {
        RopeSpec {
            kind,
            n_heads: 1,
            head_dim: 8,
            rot_dim: 8,
            theta: 10000.0,
            yarn: None,
        }
    }

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        let x0: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.5).collect();
        for kind in [
            RopeKind::Normal,
            RopeKind::Neox,
            RopeKind::MRope {
                sections: [2, 1, 1, 0],
            },
        ] {
            let mut x = x0.clone();
            let pos = Positions::linear(0, 2);
            rope(&mut x, &spec(kind), &pos, None);
            assert_eq!(&x[..8], &x0[..8]);
            let n0: f32 = x0[8..].iter().map(|v| v * v).sum();
            let n1: f32 = x[8..].iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-5);
        }
    }

    #[test]
    fn neox_rotates_halves_by_position_times_frequency() {
        let mut x = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        rope(
            &mut x,
            &spec(RopeKind::Neox),
            &Positions::linear(3, 1),
            None,
        );
        assert!((x[0] - 3f32.cos()).abs() < 1e-6 && (x[4] - 3f32.sin()).abs() < 1e-6);
        let mut y = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        rope(
            &mut y,
            &spec(RopeKind::Normal),
            &Positions::linear(3, 1),
            None,
        );
        assert!((y[0] - 3f32.cos()).abs() < 1e-6 && (y[1] - 3f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn mrope_sections_take_their_components() {
        // pairs 0,1 -> t; pair 2 -> h; pair 3 -> w
        let s = spec(RopeKind::MRope {
            sections: [2, 1, 1, 0],
        });
        let pos = Positions {
            components: 4,
            data: vec![5, 7, 11, 0],
        };
        let mut x = vec![0.0; 8];
        x[2] = 1.0; // pair 2 (h)
        x[3] = 1.0; // pair 3 (w)
        rope(&mut x, &s, &pos, None);
        let (a_h, a_w) = (7.0 * s.inv_freq(2), 11.0 * s.inv_freq(3));
        assert!((x[2] - a_h.cos()).abs() < 1e-6 && (x[6] - a_h.sin()).abs() < 1e-6);
        assert!((x[3] - a_w.cos()).abs() < 1e-6 && (x[7] - a_w.sin()).abs() < 1e-6);
    }

    #[test]
    fn vision_rope_rows_then_columns() {
        let s = spec(RopeKind::Vision2d);
        let pos = Positions {
            components: 2,
            data: vec![2, 3],
        };
        let mut x = vec![0.0; 8];
        x[0] = 1.0; // pair 0: row, freq 0
        x[2] = 1.0; // pair 2: column, freq 0
        rope(&mut x, &s, &pos, None);
        assert!((x[0] - 2f32.cos()).abs() < 1e-6 && (x[4] - 2f32.sin()).abs() < 1e-6);
        assert!((x[2] - 3f32.cos()).abs() < 1e-6 && (x[6] - 3f32.sin()).abs() < 1e-6);
    }
}
