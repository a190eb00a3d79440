//! The micro-benchmarks of the install-phase profile: one-node graphs (a
//! matrix product, attention over a cache, element-wise ops) with random
//! weights, over the shapes of real model families.

use std::sync::Arc;

use ats_core::dtype::DType;
use ats_core::gguf::Backing;
use ats_core::graph::{
    AttnSpec, ExpertAct, Graph, GraphBuilder, GraphInput, KvCacheInfo, Mask, Op, Routing, Rows,
    SubLayer, WeightInfo,
};

/// One micro-benchmark: a graph, its weights, and the rows it takes.
#[derive(Clone)]
pub(super) struct Micro {
    pub graph: Arc<Graph>,
    pub host: Arc<Backing>,
    /// Node whose time is the sample.
    pub node: usize,
    pub tokens: usize,
    pub past: usize,
}

fn weight(name: &str, dtype: DType, ne: Vec<usize>, offset: &mut u64) -> WeightInfo {
    let n: usize = ne.iter().product();
    let bytes = dtype.bytes_for(n as u64).expect("whole blocks");
    let w = WeightInfo {
        name: name.into(),
        dtype,
        ne,
        bytes,
        file_offset: *offset,
        layer: None,
        sublayer: SubLayer::FfnUp,
    };
    *offset += bytes.div_ceil(64) * 64;
    w
}

thread_local! {
    /// Whether micro-benchmarks get random weights (a real device) or
    /// zeros (a machine model that only times them: no data is read).
    static RANDOM_WEIGHTS: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Runs `f` with micro-benchmark weights left zero (for devices that only
/// model time: generating random tensors of every shape takes seconds).
pub(super) fn with_zero_weights<R>(f: impl FnOnce() -> R) -> R {
    let before = RANDOM_WEIGHTS.with(|c| c.replace(false));
    let out = f();
    RANDOM_WEIGHTS.with(|c| c.set(before));
    out
}

fn weights_backing(ws: &[&WeightInfo]) -> Arc<Backing> {
    let end = ws
        .iter()
        .map(|w| w.file_offset + w.bytes)
        .max()
        .unwrap_or(0);
    let mut data = vec![0u8; end as usize];
    if !RANDOM_WEIGHTS.with(|c| c.get()) {
        return Arc::new(Backing::Owned(data));
    }
    for (i, w) in ws.iter().enumerate() {
        let n = w.ne.iter().product::<usize>();
        let a = (3.0 / w.cols() as f32).sqrt();
        let bytes = ats_core::synth::random_tensor(w.dtype, n, a, 17 + i as u64);
        data[w.file_offset as usize..][..bytes.len()].copy_from_slice(&bytes);
    }
    // held as a loaded model's weights are (huge pages stream faster); an
    // anonymous mapping fails only where the `Vec` above would have aborted
    Arc::new(Backing::resident_copy(&data).expect("memory for the profile's weights"))
}

pub(super) fn matmul_micro(dtype: DType, rows: usize, cols: usize, tokens: usize) -> Micro {
    let mut off = 0;
    let w = weight("w", dtype, vec![cols, rows], &mut off);
    let host = weights_backing(&[&w]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols });
    let wi = b.weight(w);
    let out = b.matmul("matmul", 0, wi, None);
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 0,
        tokens,
        past: 0,
    }
}

pub(super) fn attention_micro(
    n_heads: usize,
    n_kv: usize,
    hd: usize,
    tokens: usize,
    ctx: usize,
) -> Micro {
    let (dq, dkv) = (n_heads * hd, n_kv * hd);
    let mut off = 0;
    let wk = weight("wk", DType::F32, vec![dq, dkv], &mut off);
    let wv = weight("wv", DType::F32, vec![dq, dkv], &mut off);
    let host = weights_backing(&[&wk, &wv]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols: dq });
    let (k, v) = {
        let (wk, wv) = (b.weight(wk), b.weight(wv));
        (b.matmul("k", 0, wk, None), b.matmul("v", 0, wv, None))
    };
    let cache = b.kv_cache(KvCacheInfo {
        layer: 0,
        n_kv_heads: n_kv,
        head_dim: hd,
    });
    let spec = AttnSpec {
        cache: Some(cache),
        n_heads,
        n_kv_heads: n_kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        mask: Mask::Causal,
        window: None,
        sinks: false,
    };
    let out = b.attention("attention", [0, k, v], spec, None);
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 2,
        tokens,
        past: ctx.saturating_sub(tokens),
    }
}

/// The routed experts of one MoE layer of Qwen3-30B-A3B's shapes (128
/// experts, 8 a token, 2048 wide, 768 per expert), timed after their router:
/// a routed layer's cost is its experts' products, padded to the kernel's
/// tiles and paying a fixed cost per expert, which no dense product shows.
pub(super) fn moe_micro() -> Micro {
    let (d, f, e, k) = (2048, 768, 128, 8);
    let mut off = 0;
    let router = weight("router", DType::F32, vec![d, e], &mut off);
    let stacked = |name: &str, ne: Vec<usize>, off: &mut u64| weight(name, DType::Q4K, ne, off);
    let gate = stacked("gate", vec![d, f, e], &mut off);
    let up = stacked("up", vec![d, f, e], &mut off);
    let down = stacked("down", vec![f, d, e], &mut off);
    let host = weights_backing(&[&router, &gate, &up, &down]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols: d });
    let wr = b.weight(router);
    let ws = [b.weight(gate), b.weight(up), b.weight(down)];
    let routing = b.node(
        "router",
        Op::MoeRouter {
            n_expert: e,
            top_k: k,
            routing: Routing::SOFTMAX_NORM,
        },
        &[0],
        &[wr],
        Rows::Tokens,
        2 * k,
    );
    let op = Op::MoeExperts {
        n_expert: e,
        top_k: k,
        act: ExpertAct::SwiGlu,
        biases: false,
    };
    let out = b.node("experts", op, &[0, routing], &ws, Rows::Tokens, d);
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 1,
        tokens: 1,
        past: 0,
    }
}

pub(super) fn elementwise_micro(op: &str, cols: usize, tokens: usize) -> Micro {
    let mut off = 0;
    let w = weight("norm", DType::F32, vec![cols], &mut off);
    let host = weights_backing(&[&w]);
    let mut b = GraphBuilder::new(GraphInput::Rows { cols });
    let out = match op {
        "rms_norm" => {
            let wi = b.weight(w);
            b.rms_norm("rms_norm", 0, wi, 1e-5, cols)
        }
        "swiglu" => b.swiglu("swiglu", 0, 0),
        _ => b.add("add", 0, 0),
    };
    Micro {
        graph: Arc::new(b.finish(out)),
        host,
        node: 0,
        tokens,
        past: 0,
    }
}

/// The shapes a profile measures: the matrices of real model families.
pub(super) fn matmul_shapes(quick: bool) -> Vec<(usize, usize)> {
    if quick {
        vec![(576, 576), (1536, 576), (2048, 2048), (8192, 2048)]
    } else {
        vec![
            (576, 576),
            (1536, 576),
            (576, 1536),
            (2048, 2048),
            (8192, 2048),
            (2048, 8192),
            (4096, 4096),
            (14336, 4096),
        ]
    }
}

pub(super) fn token_counts(quick: bool) -> Vec<usize> {
    if quick {
        vec![1, 16, 128]
    } else {
        vec![1, 4, 16, 64, 512]
    }
}

pub(super) fn dtypes(quick: bool) -> Vec<DType> {
    if quick {
        vec![DType::Q4_1, DType::Q4K, DType::Q6K, DType::Q8_0, DType::F32]
    } else {
        vec![
            DType::F32,
            DType::F16,
            DType::Q8_0,
            DType::Q4_0,
            DType::Q4_1,
            DType::Q5_0,
            DType::Q4K,
            DType::Q5K,
            DType::Q6K,
            DType::IQ4NL,
            DType::IQ4XS,
            DType::MXFP4,
        ]
    }
}

/// Every micro-benchmark of a profile: products per type, shape and batch
/// (the largest skipped to keep a profile to minutes; K-quant rows need
/// whole 256-element super-blocks), attention per context, element-wise ops.
pub(super) fn micro_set(quick: bool) -> Vec<Micro> {
    let mut micros: Vec<Micro> = Vec::new();
    let most_work = if quick { 3e9 } else { 8e9 };
    for dt in dtypes(quick) {
        for &(r, c) in &matmul_shapes(quick) {
            for &t in &token_counts(quick) {
                if (r * c * t) as f64 > most_work || c % dt.block_size() != 0 {
                    continue;
                }
                micros.push(matmul_micro(dt, r, c, t));
            }
        }
    }
    let attn_ctx: &[usize] = if quick {
        &[256, 2048, 8192]
    } else {
        &[128, 512, 2048, 8192]
    };
    for &(h, kv, hd) in &[(9usize, 3usize, 64usize), (32, 8, 128)] {
        for &ctx in attn_ctx {
            for t in [1usize, 64].into_iter().filter(|&t| t <= ctx) {
                micros.push(attention_micro(h, kv, hd, t, ctx));
            }
        }
    }
    for op in ["add", "rms_norm", "swiglu"] {
        for cols in [576usize, 4096] {
            for t in [1usize, 512] {
                micros.push(elementwise_micro(op, cols, t));
            }
        }
    }
    micros
}

/// The large batches a real GPU also measures: its time per token falls
/// steeply with the batch, so prompt tiers cannot be extrapolated from the
/// small batches the CPU can afford. The same weights at 512 and 2048
/// tokens (attention: the whole 2048 context).
pub(super) fn large_batch_set(quick: bool) -> Vec<Micro> {
    let mut shapes: Vec<Micro> = Vec::new();
    for dt in dtypes(quick) {
        for &(r, c) in &[(4096usize, 4096usize), (14336, 4096), (4096, 14336)] {
            if c % dt.block_size() == 0 {
                shapes.push(matmul_micro(dt, r, c, 512));
            }
        }
    }
    shapes.push(attention_micro(32, 8, 128, 512, 2048));
    let mut out = Vec::new();
    for m in shapes {
        let end = m.tokens + m.past;
        out.push(Micro {
            tokens: 2048,
            past: end.saturating_sub(2048),
            ..m.clone()
        });
        out.push(m);
    }
    out
}

/// The routed-expert micro-benchmarks, one layer's weights (340 MB) shared
/// by every batch: the profile's batches up to a 512-token prompt, and on a
/// GPU (`gpu`) a 2048-token one too.
pub(super) fn expert_set(quick: bool, gpu: bool) -> Vec<Micro> {
    let moe = moe_micro();
    let mut tokens = token_counts(quick);
    tokens.push(512);
    if gpu {
        tokens.push(2048);
    }
    tokens.dedup();
    tokens
        .into_iter()
        .map(|tokens| Micro {
            tokens,
            ..moe.clone()
        })
        .collect()
}
