//! llama.cpp's baselines (`--policy layers` and `--policy cpu-moe`), as
//! policies beside the planner's own: whole layers on the GPU filled to the
//! budget from the last layer (`-ngl`), the boundary layer split at its
//! attention/FFN halves; large prompt batches of CPU layers run on the GPU
//! with their weights streamed, as llama.cpp offloads such ops; prompts in
//! micro-batches of [`UBATCH`] tokens.

use ats_core::graph::SubLayer;

use super::PlanKind;
use super::context::Ctx;

/// llama.cpp's default micro-batch (`n_ubatch`): the largest prompt chunk
/// its baselines run in one round.
pub(super) const UBATCH: usize = 512;

/// The batch size from which llama.cpp runs the matrix products of a
/// CPU-resident layer on the GPU, copying the weights over (its
/// `GGML_OP_OFFLOAD_MIN_BATCH`, 32): a rule of the baseline, not a
/// decision of ATS's planner, which weighs every tier by cost.
pub(super) const OFFLOAD_MIN_BATCH: usize = 32;

/// The plan shape llama.cpp runs a tier of `tier` tokens with, in a layout
/// with temp slots.
pub(super) fn shape(tier: usize) -> PlanKind {
    if tier >= OFFLOAD_MIN_BATCH {
        PlanKind::GpuOnly
    } else {
        PlanKind::Static
    }
}

/// Residency as llama.cpp fills layers: from the last layer backwards, whole
/// layers while they fit, then the boundary layer's FFN half; the output
/// projection only once every layer is on the GPU. `skip_experts` keeps
/// routed experts on the CPU (`--cpu-moe`).
pub(super) fn resident_layers(
    ctx: &Ctx<'_>,
    avail: u64,
    skip_experts: bool,
) -> (Vec<bool>, Vec<String>) {
    let n = ctx.items.len();
    let mut on = vec![false; n];
    let mut why = vec![String::from("layers: did not fit"); n];
    let mut used = 0u64;
    let n_layer = ctx
        .items
        .iter()
        .filter_map(|i| i.layer)
        .max()
        .map_or(0, |l| l + 1);
    let eligible = |i: usize| !(skip_experts && ctx.items[i].experts.is_some());
    // puts `set` on the GPU with `reason` if it fits in what is left
    let mut take = |set: &[usize], reason: String| {
        let bytes: u64 = set.iter().map(|&i| ctx.items[i].bytes()).sum();
        if used + bytes > avail {
            return false;
        }
        used += bytes;
        for &i in set {
            on[i] = true;
            why[i] = reason.clone();
        }
        true
    };
    let mut all_fit = true;
    for l in (0..n_layer).rev() {
        let idx: Vec<usize> = (0..n)
            .filter(|&i| ctx.items[i].layer == Some(l) && eligible(i))
            .collect();
        if take(&idx, format!("layers: layer {l} fits on the GPU")) {
            continue;
        }
        all_fit = false;
        let ffn: Vec<usize> = idx
            .iter()
            .copied()
            .filter(|&i| {
                matches!(
                    ctx.items[i].sublayer,
                    SubLayer::FfnUp
                        | SubLayer::FfnDown
                        | SubLayer::MoeRouter
                        | SubLayer::MoeExperts
                )
            })
            .collect();
        take(
            &ffn,
            format!("layers: boundary layer {l}, FFN half on the GPU"),
        );
        break;
    }
    for i in 0..n {
        if skip_experts && ctx.items[i].experts.is_some() {
            why[i] = "cpu-moe: routed experts stay on the CPU".into();
        }
        if ctx.items[i].layer.is_none() {
            if all_fit && used + ctx.items[i].bytes() <= avail {
                used += ctx.items[i].bytes();
                on[i] = true;
                why[i] = "layers: every layer fits, the output too".into();
            } else {
                why[i] = "layers: the output goes to the GPU only with every layer".into();
            }
        }
    }
    (on, why)
}
