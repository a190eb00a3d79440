//! Cost facts of a node as functions of the round's shape: the numbers the
//! scheduler's cost model combines with measured throughput.

use serde::Serialize;

use super::{Graph, Mask, Node, Op, Rows};

/// The shape of a round, as far as costs depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RoundShape {
    /// New tokens (rows) in the round.
    pub n_tokens: usize,
    /// Tokens already in the KV cache before the round.
    pub past: usize,
    /// Rows whose output (logits) is wanted.
    pub n_outputs: usize,
}

impl RoundShape {
    /// A prefill of `n` tokens with no past that wants the last logits.
    pub fn prefill(n: usize) -> Self {
        RoundShape {
            n_tokens: n,
            past: 0,
            n_outputs: 1,
        }
    }

    /// One decode step at context length `past`.
    pub fn decode(past: usize) -> Self {
        RoundShape {
            n_tokens: 1,
            past,
            n_outputs: 1,
        }
    }
}

/// What a node does for a round: arithmetic, bytes of weights it reads, and
/// activation bytes in and out (what crosses PCIe when neighbours differ).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct NodeCost {
    /// Floating-point operations (multiply-add = 2).
    pub flops: f64,
    /// Bytes of weights read.
    pub weight_bytes: f64,
    /// Bytes of the KV cache read and written.
    pub kv_bytes: f64,
    /// Bytes of input activations.
    pub act_in_bytes: f64,
    /// Bytes of the output activation.
    pub act_out_bytes: f64,
}

impl NodeCost {
    /// Bytes moved through memory in all (for a roofline).
    pub fn memory_bytes(&self) -> f64 {
        self.weight_bytes + self.kv_bytes + self.act_in_bytes + self.act_out_bytes
    }

    /// FLOPs per byte moved.
    pub fn intensity(&self) -> f64 {
        self.flops / self.memory_bytes().max(1.0)
    }
}

/// Expected number of distinct experts hit when `tokens` tokens each pick
/// `top_k` of `n_expert` uniformly: `E * (1 - (1 - k/E)^T)`.
pub fn expected_experts(n_expert: usize, top_k: usize, tokens: usize) -> f64 {
    let e = n_expert as f64;
    let miss = (1.0 - top_k as f64 / e).max(0.0);
    e * (1.0 - miss.powi(tokens.min(i32::MAX as usize) as i32))
}

/// Bytes per element of a KV cache in a given precision.
pub fn kv_elem_bytes(f16: bool) -> f64 {
    if f16 { 2.0 } else { 4.0 }
}

impl Graph {
    /// The cost of node `i` for a round, with an f16 (true) or f32 KV cache.
    pub fn node_cost(&self, i: usize, shape: RoundShape, kv_f16: bool) -> NodeCost {
        let n: &Node = &self.nodes[i];
        let rows_of = |r: Rows| r.resolve(shape.n_tokens, shape.n_outputs) as f64;
        let out = &self.values[n.output];
        let out_rows = rows_of(out.rows);
        let out_elems = out_rows * out.cols as f64;
        let act_in: f64 = n
            .inputs
            .iter()
            .map(|&v| {
                if v == 0 && self.input == super::GraphInput::Tokens {
                    4.0 * shape.n_tokens as f64
                } else {
                    rows_of(self.values[v].rows) * self.values[v].cols as f64 * 4.0
                }
            })
            .sum();
        let wbytes = |k: usize| {
            n.weights
                .get(k)
                .map_or(0.0, |&w| self.weights[w].bytes as f64)
        };
        let all_weights: f64 = (0..n.weights.len()).map(wbytes).sum();
        let mut c = NodeCost {
            flops: 0.0,
            weight_bytes: all_weights,
            kv_bytes: 0.0,
            act_in_bytes: act_in,
            act_out_bytes: out_elems * 4.0,
        };
        match &n.op {
            Op::Embed => {
                // only the looked-up rows are read
                let w = &self.weights[n.weights[0]];
                c.weight_bytes = shape.n_tokens as f64 * w.bytes as f64 / w.rows().max(1) as f64;
            }
            Op::MatMul => {
                let w = &self.weights[n.weights[0]];
                c.flops = 2.0 * out_rows * w.cols() as f64 * w.rows() as f64;
            }
            Op::RmsNorm { .. } | Op::LayerNorm { .. } => c.flops = 4.0 * out_elems,
            Op::Add
            | Op::Mul
            | Op::SelectRows
            | Op::PermuteRows { .. }
            | Op::MergeRows { .. }
            | Op::GatherCols { .. } => c.flops = out_elems,
            Op::ReluSqr => c.flops = 2.0 * out_elems,
            Op::Rope(_) => c.flops = 3.0 * out_elems,
            Op::SwiGlu | Op::Gelu(_) => c.flops = 8.0 * out_elems,
            Op::Attention(a) => {
                let t = shape.n_tokens as f64;
                let (keys_per_query, kv_rows) = match (&a.cache, &a.mask) {
                    // a sliding window sees at most `window` keys and reads
                    // only the cache rows inside some query's window
                    (Some(_), _) => match a.window {
                        Some(w) => {
                            let w = w as f64;
                            let seen = (shape.past as f64 + (t + 1.0) / 2.0).min(w);
                            (seen, (shape.past as f64 + t).min(w + t - 1.0))
                        }
                        None => (shape.past as f64 + (t + 1.0) / 2.0, shape.past as f64 + t),
                    },
                    // vision: full attention sees every row, windows see about one window
                    (None, Mask::Full) | (None, Mask::Causal) => (t, t),
                    (None, Mask::Segments) => (t.min(64.0), t),
                };
                c.flops = 4.0 * (a.n_heads * a.head_dim) as f64 * t * keys_per_query;
                if a.cache.is_some() {
                    c.kv_bytes =
                        2.0 * kv_rows * (a.n_kv_heads * a.head_dim) as f64 * kv_elem_bytes(kv_f16);
                }
            }
            Op::MoeRouter { n_expert, .. } => {
                c.flops = 2.0
                    * shape.n_tokens as f64
                    * self.values[n.inputs[0]].cols as f64
                    * *n_expert as f64;
            }
            Op::MoeExperts {
                n_expert, top_k, ..
            } => {
                let hit = expected_experts(*n_expert, *top_k, shape.n_tokens);
                c.weight_bytes = all_weights * hit / *n_expert as f64;
                let gate = &self.weights[n.weights[0]];
                c.flops = 2.0
                    * shape.n_tokens as f64
                    * *top_k as f64
                    * 3.0
                    * gate.cols() as f64
                    * gate.rows() as f64;
            }
        }
        c
    }
}
