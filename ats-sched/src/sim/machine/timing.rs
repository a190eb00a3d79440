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
    /// Of `flops`, attention of sequences with at most [`DECODE_ROWS`]
    /// query rows (the CPU kernel's key-split decode path), each divided by
    /// its [`decode_attn_share`]: the prompt-rate FLOPs it costs.
    pub decode_flops: f64,
    /// Of `flops`, the attention FLOPs those sequences really do.
    pub decode_raw_flops: f64,
}

/// Query rows of a sequence up to which the CPU attention kernel takes its
/// key-split decode path (`ats-cpu/src/ops/attention.rs`: at most 8 rows).
pub(crate) const DECODE_ROWS: usize = 8;

/// The rate of the CPU's decode attention as a share of its prompt
/// attention rate (`core_attn_gflops`), over `keys` keys. Measured with
/// ATS's kernels on the development machine's Zen 3 cores
/// (`ats-cli/tests/data/profile-quick-2cpu.json`, llama-8b's 32 heads / 8
/// KV heads of 128, 2 threads): one query row over 256 keys at 8.0
/// GFLOP/s a core against 15.7 for 64 rows (0.51), over 2048 keys 9.3
/// against 15.0 (0.62); between them by the logarithm of the keys. Without
/// it the model priced decode attention on the host below the GPU's (0.116
/// against 0.147 ms on `h200-host`), so the residency DP kept every KV
/// cache on the host and a 2048-token prompt attended on the CPU (6.9 of
/// 7.8 s), where the H200 runs prefilled at 2351-2390 tokens/s.
fn decode_attn_share(keys: f64) -> f64 {
    let x = ((keys.max(1.0) / 256.0).log2() / 3.0).clamp(0.0, 1.0);
    0.51 + 0.11 * x
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
            decode_flops: 0.0,
            decode_raw_flops: 0.0,
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
            if s.len() <= DECODE_ROWS {
                w.decode_raw_flops += c.flops;
                w.decode_flops += c.flops / decode_attn_share((s.past + s.len()) as f64);
            }
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
    let decode = class == Class::Attention && shape.n_tokens <= DECODE_ROWS;
    Work {
        class,
        flops: c.flops,
        bytes: c.memory_bytes(),
        tokens: shape.n_tokens.max(1) as f64,
        expert_products,
        expert_tokens,
        decode_flops: if decode {
            c.flops / decode_attn_share((shape.past + shape.n_tokens) as f64)
        } else {
            0.0
        },
        decode_raw_flops: if decode { c.flops } else { 0.0 },
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
            // routed experts: a tiled kernel pads each expert's tokens to a
            // tile. One launch runs every hit expert's tiles: few tiles (a
            // decode round's) run at one small product's rate, while a
            // prompt's many tiles fill the SMs up to the kernel's own rate
            // (`moe_tflops`); pricing a prompt's experts at one expert's
            // 32 tokens put them at 2.9 TFLOP/s on `h200-host` and its MoE
            // prefill 35% slow
            let pad = (g.moe_tile_tokens / w.expert_tokens.max(1.0)).max(1.0);
            let tokens = w.expert_tokens.max(g.moe_tile_tokens).max(1.0);
            let one = g.gemm_tflops * (tokens / g.gemm_ramp_tokens).min(1.0);
            let tiles =
                w.expert_products / 3.0 * (w.expert_tokens / g.moe_tile_tokens).ceil().max(1.0);
            let all = g.moe_tflops * (tiles / g.sms.max(1) as f64).min(1.0);
            let rate = one.max(all) * 1e12;
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
    (
        (w.flops - w.decode_raw_flops + w.decode_flops) / rate,
        w.bytes,
    )
}

/// The fixed seconds of `w` on the CPU: a fork and join, and one per
/// routed expert product.
pub(crate) fn cpu_fixed_secs(h: &HostSpec, w: &Work) -> f64 {
    (h.dispatch_us + h.expert_us * w.expert_products) * 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::machine::spec::MachineSpec;

    fn attention(flops: f64, decode: bool, keys: f64) -> Work {
        Work {
            class: Class::Attention,
            flops,
            bytes: 0.0,
            tokens: if decode { 1.0 } else { 64.0 },
            expert_products: 0.0,
            expert_tokens: 0.0,
            decode_flops: if decode {
                flops / decode_attn_share(keys)
            } else {
                0.0
            },
            decode_raw_flops: if decode { flops } else { 0.0 },
        }
    }

    #[test]
    fn decode_attention_runs_at_the_measured_share_of_the_prompt_rate() {
        let h = MachineSpec::parse("h200-host").unwrap().host;
        let prompt = cpu_parts(&h, &attention(1e9, false, 2048.0)).0;
        // the shares measured on Zen 3 at 256 and 2048 keys
        for (keys, share) in [(256.0, 0.51), (2048.0, 0.62), (64.0, 0.51), (1e6, 0.62)] {
            let decode = cpu_parts(&h, &attention(1e9, true, keys)).0;
            assert!(
                (prompt / decode - share).abs() < 1e-12,
                "{keys}: {}",
                prompt / decode
            );
        }
    }

    #[test]
    fn a_prompts_experts_fill_the_gpu_up_to_the_kernels_rate() {
        let g = MachineSpec::parse("h200-host").unwrap().gpu;
        // 512 tokens, top 8 of 128: every expert hit with 32 tokens
        let w = Work {
            class: Class::MatMul,
            flops: 38.7e9,
            bytes: 0.0,
            tokens: 512.0,
            expert_products: 3.0 * 128.0,
            expert_tokens: 32.0,
            decode_flops: 0.0,
            decode_raw_flops: 0.0,
        };
        let secs = gpu_secs(&g, &w) - g.kernel_us * 1e-6;
        // padded to 64-token tiles, 128 tiles on 132 SMs at moe_tflops
        let want = 38.7e9 * 2.0 / (g.moe_tflops * 1e12 * 128.0 / 132.0);
        assert!((secs - want).abs() < 1e-12, "{secs} vs {want}");
    }
}
