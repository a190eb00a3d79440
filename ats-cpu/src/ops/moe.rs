//! Mixture-of-experts routing and routed SwiGLU experts.

use crate::matmul::{Isa, MatmulError, WeightMatrix, matmul};
use ats_core::dtype::DType;
use ats_core::graph::{ExpertAct, Gating, Routing};

use super::elementwise::{swiglu, swiglu_oai};

/// Chooses and weighs experts from router logits, per row: scores by
/// `routing.gating` (a softmax over the row, or a sigmoid per logit), the
/// top k by score (plus `select_bias` for sigmoid gating; ties to the lower
/// id, a NaN last), their scores renormalised to sum to one if
/// `routing.norm_topk`, times `routing.scale`. Writes `top_k` ids (as f32)
/// then `top_k` weights per row.
pub fn route(
    logits: &[f32],
    (n_expert, top_k): (usize, usize),
    routing: Routing,
    select_bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let mut scores = vec![0f32; n_expert];
    let mut choice = vec![0f32; n_expert];
    for (row, o) in logits
        .chunks_exact(n_expert)
        .zip(out.chunks_exact_mut(2 * top_k))
    {
        match routing.gating {
            Gating::Softmax => {
                let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                for (s, &x) in scores.iter_mut().zip(row) {
                    *s = (x - mx).exp();
                }
                let z: f32 = scores.iter().sum();
                for s in &mut scores {
                    *s /= z;
                }
                choice.copy_from_slice(&scores);
            }
            Gating::Sigmoid => {
                for (j, (s, &x)) in scores.iter_mut().zip(row).enumerate() {
                    *s = 1.0 / (1.0 + (-x).exp());
                    choice[j] = *s + select_bias.map_or(0.0, |b| b[j]);
                }
            }
        }
        let mut idx: Vec<usize> = (0..n_expert).collect();
        // NaN-safe total order: a NaN score sorts last
        idx.sort_by(|&a, &b| {
            choice[b]
                .partial_cmp(&choice[a])
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(a.cmp(&b))
        });
        let sel = &idx[..top_k];
        let sum: f32 = sel.iter().map(|&i| scores[i]).sum();
        for (k, &i) in sel.iter().enumerate() {
            o[k] = i as f32;
            let p = scores[i];
            let w = if routing.norm_topk && sum > 0.0 {
                p / sum
            } else {
                p
            };
            o[top_k + k] = w * routing.scale;
        }
    }
}

/// The stacked expert weights of one layer: `[n_expert, rows, cols]` each.
#[derive(Clone, Copy, Debug)]
pub struct Experts<'a> {
    /// Gate projections (`n_ff x n_embd` each).
    pub gate: (&'a [u8], DType),
    /// Up projections.
    pub up: (&'a [u8], DType),
    /// Down projections (`n_embd x n_ff` each).
    pub down: (&'a [u8], DType),
    /// Experts.
    pub n_expert: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Expert FFN size.
    pub n_ff: usize,
    /// How gate and up combine.
    pub act: ExpertAct,
    /// Per-expert biases of gate, up (`n_expert x n_ff`) and down
    /// (`n_expert x n_embd`), when the experts have them.
    pub biases: Option<[&'a [f32]; 3]>,
}

fn expert_matrix(
    data: &[u8],
    dtype: DType,
    e: usize,
    n_expert: usize,
    rows: usize,
    cols: usize,
) -> WeightMatrix<'_> {
    let per = data.len() / n_expert;
    WeightMatrix {
        dtype,
        rows,
        cols,
        data: &data[e * per..(e + 1) * per],
    }
}

/// `out[t] = sum_k w[t,k] * down_e(act(gate_e x[t], up_e x[t]))` for the
/// routed experts `e = ids[t,k]` (each product plus its expert's bias when
/// there are biases); tokens are gathered per expert so each expert's
/// weights are read once per call.
pub fn experts(
    x: &[f32],
    routing: &[f32],
    top_k: usize,
    w: &Experts<'_>,
    out: &mut [f32],
    isa: Isa,
) -> Result<(), MatmulError> {
    let (d, f) = (w.n_embd, w.n_ff);
    let n_tokens = x.len() / d;
    out.fill(0.0);
    let mut per_expert: Vec<Vec<(usize, f32)>> = vec![Vec::new(); w.n_expert];
    for t in 0..n_tokens {
        let r = &routing[t * 2 * top_k..(t + 1) * 2 * top_k];
        for k in 0..top_k {
            let e = r[k] as usize;
            if e < w.n_expert {
                per_expert[e].push((t, r[top_k + k]));
            }
        }
    }
    for (e, toks) in per_expert.iter().enumerate() {
        if toks.is_empty() {
            continue;
        }
        let n = toks.len();
        let mut xe = Vec::with_capacity(n * d);
        for &(t, _) in toks {
            xe.extend_from_slice(&x[t * d..(t + 1) * d]);
        }
        let mut g = vec![0.0; n * f];
        let mut u = vec![0.0; n * f];
        matmul(
            &expert_matrix(w.gate.0, w.gate.1, e, w.n_expert, f, d),
            &xe,
            n,
            &mut g,
            isa,
        )?;
        matmul(
            &expert_matrix(w.up.0, w.up.1, e, w.n_expert, f, d),
            &xe,
            n,
            &mut u,
            isa,
        )?;
        if let Some([bg, bu, _]) = w.biases {
            add_rows(&mut g, &bg[e * f..(e + 1) * f]);
            add_rows(&mut u, &bu[e * f..(e + 1) * f]);
        }
        let mut a = vec![0.0; n * f];
        match w.act {
            ExpertAct::SwiGlu => swiglu(&g, &u, &mut a),
            ExpertAct::SwiGluOai { alpha, limit } => swiglu_oai(&g, &u, alpha, limit, &mut a),
        }
        let mut y = vec![0.0; n * d];
        matmul(
            &expert_matrix(w.down.0, w.down.1, e, w.n_expert, d, f),
            &a,
            n,
            &mut y,
            isa,
        )?;
        if let Some([_, _, bd]) = w.biases {
            add_rows(&mut y, &bd[e * d..(e + 1) * d]);
        }
        for (i, &(t, wt)) in toks.iter().enumerate() {
            for (o, &v) in out[t * d..(t + 1) * d]
                .iter_mut()
                .zip(&y[i * d..(i + 1) * d])
            {
                *o += wt * v;
            }
        }
    }
    Ok(())
}

/// Adds `bias` to every row of `x` (rows of `bias.len()`).
fn add_rows(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len().max(1)) {
        for (o, &b) in row.iter_mut().zip(bias) {
            *o += b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_picks_top_k_and_renormalises() {
        let logits = [0.0, 2.0, 1.0, 2.0];
        let mut out = [0.0; 4];
        route(&logits, (4, 2), Routing::SOFTMAX_NORM, None, &mut out);
        assert_eq!(&out[..2], &[1.0, 3.0]); // tie broken toward the lower id
        assert!((out[2] - 0.5).abs() < 1e-6 && (out[3] - 0.5).abs() < 1e-6);
        let plain = Routing {
            norm_topk: false,
            ..Routing::SOFTMAX_NORM
        };
        route(&logits, (4, 2), plain, None, &mut out);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((out[2] - 2f32.exp() / z).abs() < 1e-6);
    }

    #[test]
    fn sigmoid_routing_chooses_with_the_bias_and_weighs_without_it() {
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        let logits = [0.0, 2.0, 1.0, -1.0];
        // the bias lifts expert 3 above 1 and 2 for the choice only
        let bias = [0.0, 0.0, 0.3, 2.0];
        let routing = Routing {
            gating: Gating::Sigmoid,
            norm_topk: true,
            scale: 2.5,
        };
        let mut out = [0.0; 4];
        route(&logits, (4, 2), routing, Some(&bias), &mut out);
        assert_eq!(&out[..2], &[3.0, 2.0]);
        let (a, b) = (sig(-1.0), sig(1.0));
        assert!((out[2] - 2.5 * a / (a + b)).abs() < 1e-6, "{out:?}");
        assert!((out[3] - 2.5 * b / (a + b)).abs() < 1e-6, "{out:?}");
        let raw = Routing {
            norm_topk: false,
            ..routing
        };
        route(&logits, (4, 2), raw, Some(&bias), &mut out);
        assert!((out[2] - 2.5 * a).abs() < 1e-6 && (out[3] - 2.5 * b).abs() < 1e-6);
    }
}
