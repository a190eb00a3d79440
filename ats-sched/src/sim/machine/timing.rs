//! What one op asks of a device (FLOPs, bytes, rows), and how long it takes
//! on the modelled CPU or GPU at nominal clock with nothing else running.
//! Load, clocks and contention are applied over time by [`super::clock`].

use ats_core::graph::cost::RoundShape;
use ats_core::graph::{Graph, Op};
use ats_core::round::Round;

use super::spec::{GpuSpec, HostSpec};

/// The kind of kernel an op is, as far as its speed goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Matrix products (dense, router, experts).
    MatMul,
    /// Attention.
    Attention,
    /// Element-wise and row movement (memory-bound).
    Elementwise,
}

/// An op's demands.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Work {
    pub class: Class,
    pub flops: f64,
    pub bytes: f64,
    /// Query rows (tokens) of the round.
    pub tokens: f64,
    /// Routed expert products the op runs (MoE experts: experts hit x 3).
    pub expert_products: f64,
    /// Tokens each routed expert takes on average (MoE experts).
    pub expert_tokens: f64,
}

/// The demands of node `node` of `g` in `round` (attention summed over the
/// round's sequences, each at its own past).
pub(crate) fn work_of(g: &Graph, node: usize, round: &Round, kv_f16: bool) -> Work {
    let n = &g.nodes[node];
    let shape = round.shape();
    let class = match n.op {
        Op::MatMul | Op::MoeRouter { .. } | Op::MoeExperts { .. } => Class::MatMul,
        Op::Attention(_) => Class::Attention,
        _ => Class::Elementwise,
    };
    if class == Class::Attention && !round.seqs.is_empty() {
        let mut w = Work {
            class,
            flops: 0.0,
            bytes: 0.0,
            tokens: shape.n_tokens as f64,
            expert_products: 0.0,
            expert_tokens: 0.0,
        };
        for s in round.seqs.iter() {
            let c = g.node_cost(
                node,
                RoundShape {
                    n_tokens: s.len(),
                    past: s.past,
                    n_outputs: 1,
                },
                kv_f16,
            );
            w.flops += c.flops;
            w.bytes += c.memory_bytes();
        }
        return w;
    }
    let c = g.node_cost(node, shape, kv_f16);
    let (expert_products, expert_tokens) = match n.op {
        Op::MoeExperts {
            n_expert, top_k, ..
        } => {
            let hit = ats_core::graph::cost::expected_experts(n_expert, top_k, shape.n_tokens);
            (3.0 * hit, (shape.n_tokens * top_k) as f64 / hit.max(1e-9))
        }
        _ => (0.0, 0.0),
    };
    Work {
        class,
        flops: c.flops,
        bytes: c.memory_bytes(),
        tokens: shape.n_tokens.max(1) as f64,
        expert_products,
        expert_tokens,
    }
}

/// One matrix-vector product's batch: up to this many rows run as a
/// memory-bound matvec (each further row costing a tenth of the first).
const MATVEC_ROWS: f64 = 8.0;

/// Seconds of `w` on the GPU at nominal clock, alone on the device.
pub(crate) fn gpu_secs(g: &GpuSpec, w: &Work) -> f64 {
    let bw = g.mem_gbps * 1e9;
    let fixed = g.kernel_us * 1e-6;
    match w.class {
        Class::MatMul if w.expert_products > 0.0 => {
            // routed experts: a tiled kernel pads each expert's tokens to a tile
            let pad = (g.moe_tile_tokens / w.expert_tokens.max(1.0)).max(1.0);
            let tokens = w.expert_tokens.max(g.moe_tile_tokens).max(1.0);
            let rate = g.gemm_tflops * 1e12 * (tokens / g.gemm_ramp_tokens).min(1.0);
            let bw = bw * g.matvec_eff;
            fixed + (w.flops * pad / rate).max(w.bytes / bw)
        }
        Class::MatMul => {
            if w.tokens <= MATVEC_ROWS {
                let one = w.bytes / (bw * g.matvec_eff);
                fixed + one * (1.0 + 0.1 * (w.tokens - 1.0))
            } else {
                let rate = g.gemm_tflops * 1e12 * (w.tokens / g.gemm_ramp_tokens).min(1.0);
                fixed + (w.flops / rate).max(w.bytes / (bw * g.matvec_eff))
            }
        }
        Class::Attention => {
            let rate = g.attn_tflops * 1e12 * (w.tokens / g.attn_ramp_tokens).min(1.0);
            fixed + g.attn_us * 1e-6 + (w.flops / rate).max(w.bytes / (bw * g.elem_eff))
        }
        Class::Elementwise => fixed + w.bytes / (bw * g.elem_eff),
    }
}

/// `w` on the CPU: seconds of compute on one core at nominal clock, and
/// bytes through memory. [`super::clock`] divides the first by the cores
/// the op gets and the second by the bandwidth it gets, and adds the fixed
/// costs ([`cpu_fixed_secs`]).
pub(crate) fn cpu_parts(h: &HostSpec, w: &Work) -> (f64, f64) {
    let rate = match w.class {
        Class::MatMul => h.core_gflops,
        Class::Attention => h.core_attn_gflops,
        // element-wise work is a few FLOPs a byte: memory-bound on any core
        Class::Elementwise => h.core_gflops * 4.0,
    } * 1e9;
    (w.flops / rate, w.bytes)
}

/// The fixed seconds of `w` on the CPU: a fork and join, and one per
/// routed expert product.
pub(crate) fn cpu_fixed_secs(h: &HostSpec, w: &Work) -> f64 {
    (h.dispatch_us + h.expert_us * w.expert_products) * 1e-6
}
