//! What a plan set puts where and why, and its memory per region: a view
//! made from the layout and the tier plans, never read back as state.

use std::collections::BTreeMap;

use ats_core::graph::Graph;
use ats_core::ledger::{Region, RegionBytes};
use serde::Serialize;

use super::PlanSet;
use crate::config::Policy;

/// Where a weight tensor is computed on between rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Resident on the GPU.
    Gpu,
    /// In host memory (computed on the CPU, or streamed per round).
    Cpu,
}

impl Placement {
    /// The name in reports (`gpu`, `cpu`).
    pub fn name(self) -> &'static str {
        match self {
            Placement::Gpu => "gpu",
            Placement::Cpu => "cpu",
        }
    }
}

/// One weight tensor's placement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorRow {
    /// Tensor name.
    pub name: String,
    /// Bytes.
    pub bytes: u64,
    /// Where it lives.
    pub placement: Placement,
    /// The GPU ledger region it uses: `resident`, `temp` when streamed in
    /// some tiers, none otherwise.
    #[serde(serialize_with = "region_or_none")]
    pub region: Option<Region>,
    /// Why it is there.
    pub why: String,
}

fn region_or_none<S: serde::Serializer>(r: &Option<Region>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(r.map_or("none", Region::name))
}

/// One placement item, for reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemRow {
    /// `blk.3 attn_qkv`, `output`, ...
    pub name: String,
    /// Its nodes.
    pub nodes: Vec<usize>,
    /// Weight plus KV bytes.
    pub bytes: u64,
    /// Resident on the GPU (KV cache there, for attention).
    pub resident: bool,
    /// Runs on the GPU in the decode (tier 1) plan.
    pub on_gpu_tier1: bool,
    /// Estimated seconds of a decode round where it runs in the tier-1 plan.
    pub est_decode_secs: f64,
    /// Estimated seconds to copy its weights to the GPU for a decode round.
    pub est_copy_secs: f64,
}

/// The plan in numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanReport {
    /// Policy.
    pub policy: Policy,
    /// The GPU budget, if a GPU is used.
    pub budget_bytes: Option<u64>,
    /// The plan's GPU peak: resident + KV + temp slots + compute buffers.
    pub peak_bytes: u64,
    /// Planned GPU bytes per region.
    pub regions: RegionBytes,
    /// Largest tier the compute buffers are sized for.
    pub max_tier: usize,
    /// Whether temp slots (streaming) are part of the layout.
    pub streaming: bool,
    /// Estimated seconds of the reference workload (a 512-token prompt, 128 tokens generated).
    pub workload_secs: f64,
    /// Seconds per GB of weight copies the plan assumed.
    pub copy_secs_per_gb: f64,
    /// Per weight tensor.
    pub tensors: Vec<TensorRow>,
    /// Per placement item.
    pub items: Vec<ItemRow>,
    /// Remarks for the user (no profile, budget notes).
    pub notes: Vec<String>,
}

impl PlanReport {
    /// The report of `set`, a plan set of `g`.
    pub fn of(g: &Graph, set: &PlanSet) -> PlanReport {
        let l = &set.layout;
        PlanReport {
            policy: set.policy,
            budget_bytes: l.budget,
            peak_bytes: l.peak_bytes(),
            regions: l.regions,
            max_tier: l.max_tier,
            streaming: l.streaming,
            workload_secs: l.workload_secs,
            copy_secs_per_gb: set.copy_secs_per_gb,
            tensors: tensor_rows(g, set),
            items: item_rows(set),
            notes: set.notes.clone(),
        }
    }
}

/// Per weight: where it is and why; streamed ones say for which tiers.
fn tensor_rows(g: &Graph, set: &PlanSet) -> Vec<TensorRow> {
    let l = &set.layout;
    let host_only_why = if l.budget.is_some() {
        "embedding lookups run on the host"
    } else {
        "no GPU"
    };
    let mut rows: Vec<TensorRow> = g
        .weights
        .iter()
        .map(|w| TensorRow {
            name: w.name.clone(),
            bytes: w.bytes,
            placement: Placement::Cpu,
            region: None,
            why: host_only_why.into(),
        })
        .collect();
    let mut streamed_in: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for t in &set.tiers {
        for (i, &on) in t.on_gpu.iter().enumerate() {
            if on && !l.resident[i] {
                streamed_in.entry(i).or_default().push(t.tier);
            }
        }
    }
    for (i, it) in l.items.iter().enumerate() {
        for &w in &it.weights {
            let row = &mut rows[w];
            row.why = l.why[i].clone();
            if l.resident[i] {
                row.placement = Placement::Gpu;
                row.region = Some(Region::Resident);
            } else if let Some(ts) = streamed_in.get(&i) {
                row.region = Some(Region::Temp);
                row.why = format!("{}; streamed to the GPU for tiers {ts:?}", l.why[i]);
            }
        }
    }
    rows
}

fn item_rows(set: &PlanSet) -> Vec<ItemRow> {
    let l = &set.layout;
    l.items
        .iter()
        .zip(&set.decode)
        .enumerate()
        .map(|(i, (it, e))| ItemRow {
            name: it.name(),
            nodes: it.nodes.clone(),
            bytes: it.bytes(),
            resident: l.resident[i],
            on_gpu_tier1: e.on_gpu,
            est_decode_secs: e.decode_secs,
            est_copy_secs: e.copy_secs,
        })
        .collect()
}
