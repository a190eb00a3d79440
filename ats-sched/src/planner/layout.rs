//! The memory layout: what stays on the GPU between rounds and the memory
//! each ledger region is planned to hold. The planner owns it; every tier's
//! plan runs in it, the executor allocates by it, and the plan report is a
//! view of it.

use ats_core::ledger::RegionBytes;
use ats_core::machine::DeviceId;

use super::items::Item;
use crate::exec::{SlotPlan, WeightHome};

/// A memory layout over the graph's placement items.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// The placement items (consecutive nodes of one layer and sub-layer).
    pub items: Vec<Item>,
    /// Per item: resident on the GPU (its weights, and its KV cache for attention).
    pub resident: Vec<bool>,
    /// Per item: why it is, or is not, resident.
    pub why: Vec<String>,
    /// Largest tier the compute buffers are sized for.
    pub max_tier: usize,
    /// Whether temp slots (streaming) are part of the layout.
    pub streaming: bool,
    /// The temp slots the non-resident streamable weights take turns in
    /// (none without streaming).
    pub slots: SlotPlan,
    /// Planned GPU bytes per ledger region.
    pub regions: RegionBytes,
    /// The GPU budget the layout was made for (`None`: no GPU).
    pub budget: Option<u64>,
    /// Estimated seconds of the reference workload it was chosen by.
    pub workload_secs: f64,
}

impl Layout {
    /// Every item on the host: the layout of a machine without a GPU.
    pub fn host_only(items: Vec<Item>, max_tier: usize) -> Layout {
        let n = items.len();
        Layout {
            items,
            resident: vec![false; n],
            why: vec!["no GPU".into(); n],
            max_tier,
            streaming: false,
            slots: SlotPlan::default(),
            regions: RegionBytes::default(),
            budget: None,
            workload_secs: 0.0,
        }
    }

    /// The GPU peak the layout plans: every region together.
    pub fn peak_bytes(&self) -> u64 {
        self.regions.total()
    }

    /// Where each weight of a graph with `n_weights` weights lives between rounds.
    pub fn weight_homes(&self, n_weights: usize) -> Vec<WeightHome> {
        let mut home = vec![WeightHome::Host; n_weights];
        for (it, _) in self.items.iter().zip(&self.resident).filter(|x| *x.1) {
            for &w in &it.weights {
                home[w] = WeightHome::Resident;
            }
        }
        home
    }

    /// The device of each of `n_caches` KV caches.
    pub fn kv_homes(&self, n_caches: usize) -> Vec<DeviceId> {
        let mut home = vec![DeviceId::Host; n_caches];
        for (it, _) in self.items.iter().zip(&self.resident).filter(|x| *x.1) {
            if let Some(c) = it.kv {
                home[c] = DeviceId::Gpu;
            }
        }
        home
    }

    /// Whether `other` keeps the same things on the GPU.
    pub fn same_residency(&self, other: &Layout) -> bool {
        self.resident == other.resident
    }
}
