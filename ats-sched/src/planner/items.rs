//! Placement items: the nodes of one (layer, sub-layer), their weights and
//! KV cache, the activations entering them, and their costs per round shape.

use std::collections::HashSet;

use ats_core::graph::cost::{RoundShape, expected_experts};
use ats_core::graph::{Graph, Op, SubLayer};

use ats_core::machine::DeviceId;

use crate::profile::{CostModel, NodeAt};

/// A unit of placement: consecutive nodes of one (layer, sub-layer).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Item {
    /// Nodes, in execution order.
    pub nodes: Vec<usize>,
    /// Weights the nodes read.
    pub weights: Vec<usize>,
    /// The KV cache, for attention items.
    pub kv: Option<usize>,
    /// Bytes of the weights.
    pub weight_bytes: u64,
    /// Bytes of the KV cache at the planned context.
    pub kv_bytes: u64,
    /// Routed experts (`Some((n_expert, top_k))`).
    pub experts: Option<(usize, usize)>,
    /// Layer.
    pub layer: Option<usize>,
    /// Sub-layer.
    pub sublayer: SubLayer,
    /// Values the item reads that are produced before it.
    pub inputs: Vec<usize>,
}

impl Item {
    /// Bytes the item occupies on the device that holds it.
    pub fn bytes(&self) -> u64 {
        self.weight_bytes + self.kv_bytes
    }

    /// Whether the item can be streamed to a GPU for a round (it has weights
    /// and no KV cache that would have to move).
    pub fn streamable(&self) -> bool {
        self.kv.is_none() && self.weight_bytes > 0
    }

    /// The name in reports: `blk.3 attn_qkv`, `output`.
    pub fn name(&self) -> String {
        let sub = serde_json::to_value(self.sublayer)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        match self.layer {
            Some(l) => format!("blk.{l} {sub}"),
            None => sub,
        }
    }
}

/// The router item whose choice routed-experts item `i` follows: the last
/// router of its layer before it.
pub fn router_of(items: &[Item], i: usize) -> Option<usize> {
    let layer = items.get(i)?.layer;
    items[..i]
        .iter()
        .rposition(|r| r.layer == layer && r.sublayer == SubLayer::MoeRouter)
}

/// Splits a graph into items; embedding lookups stay on the host and are
/// returned apart.
pub fn build_items(g: &Graph, n_ctx: usize, kv_elem: usize) -> (Vec<Item>, Vec<usize>) {
    let mut items: Vec<Item> = Vec::new();
    let mut host_only = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        if matches!(n.op, Op::Embed) {
            host_only.push(i);
            continue;
        }
        let same = items
            .last()
            .is_some_and(|it| it.layer == n.layer && it.sublayer == n.sublayer);
        if !same {
            items.push(Item {
                nodes: Vec::new(),
                weights: Vec::new(),
                kv: None,
                weight_bytes: 0,
                kv_bytes: 0,
                experts: None,
                layer: n.layer,
                sublayer: n.sublayer,
                inputs: Vec::new(),
            });
        }
        let it = items.last_mut().expect("just pushed");
        it.nodes.push(i);
        for &w in &n.weights {
            if !it.weights.contains(&w) {
                it.weights.push(w);
                it.weight_bytes += g.weights[w].bytes;
            }
        }
        match &n.op {
            Op::Attention(a) => {
                if let Some(c) = a.cache {
                    it.kv = Some(c);
                    it.kv_bytes = (2 * n_ctx * g.kv_caches[c].row_width() * kv_elem) as u64;
                }
            }
            Op::MoeExperts {
                n_expert, top_k, ..
            } => it.experts = Some((*n_expert, *top_k)),
            _ => {}
        }
    }
    let producers = g.producers();
    for it in &mut items {
        let mine: HashSet<usize> = it.nodes.iter().copied().collect();
        for &ni in &it.nodes {
            for &v in &g.nodes[ni].inputs {
                let outside = producers[v].is_none_or(|p| !mine.contains(&p));
                if outside && !it.inputs.contains(&v) {
                    it.inputs.push(v);
                }
            }
        }
    }
    (items, host_only)
}

/// An item's times at a round shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ItemCost {
    /// Seconds on the CPU.
    pub cpu: f64,
    /// Seconds on the CPU while weight copies stream beside it (they take
    /// their share of the host's memory bandwidth).
    pub cpu_streaming: f64,
    /// Seconds on the GPU.
    pub gpu: f64,
    /// Seconds to move its inputs across PCIe plus the fixed switch cost.
    pub switch: f64,
    /// Seconds to copy its weights to the GPU for the round (routed experts
    /// only for MoE, chosen by a router on the CPU: copied one by one at the
    /// link's rate).
    pub copy: f64,
    /// Seconds of the GPU's routed copy of the experts its router chose on
    /// the GPU (the copy kernel's rate at that many experts); `copy` for
    /// other items.
    pub gpu_routed_copy: f64,
}

/// Costs of every item at `shape`; without a GPU (`has_gpu` false) the
/// GPU times are infinite.
pub fn item_costs(
    g: &Graph,
    items: &[Item],
    cost: &CostModel,
    shape: RoundShape,
    kv_f16: bool,
    has_gpu: bool,
) -> Vec<ItemCost> {
    items
        .iter()
        .map(|it| {
            // per node: its time alone, and beside weight copies
            let at = |node| NodeAt {
                g,
                node,
                shape,
                kv_f16,
            };
            let (cpu, cpu_streaming) = it.nodes.iter().fold((0.0, 0.0), |(a, b), &n| {
                let alone = cost.node_secs(at(n), DeviceId::Host);
                let beside = cost.beside_copies(at(n), DeviceId::Host, alone);
                (a + alone, b + beside)
            });
            if !has_gpu {
                return ItemCost {
                    cpu,
                    cpu_streaming,
                    gpu: f64::INFINITY,
                    switch: 0.0,
                    copy: f64::INFINITY,
                    gpu_routed_copy: f64::INFINITY,
                };
            }
            let gpu_t: f64 = it
                .nodes
                .iter()
                .map(|&n| cost.node_secs(at(n), DeviceId::Gpu))
                .sum();
            let in_bytes: u64 = it
                .inputs
                .iter()
                .map(|&v| g.value_bytes(v, shape.n_tokens, shape.n_outputs))
                .sum();
            let switch =
                cost.h2d_secs(DeviceId::Gpu, in_bytes as f64) + cost.switch_secs(DeviceId::Gpu);
            let (copy, gpu_routed_copy) = match it.experts {
                Some((e, k)) => {
                    let hit = expected_experts(e, k, shape.n_tokens);
                    let bytes = it.weight_bytes as f64 * hit / e as f64;
                    (
                        cost.h2d_secs(DeviceId::Gpu, bytes),
                        cost.routed_copy_secs(DeviceId::Gpu, bytes, hit),
                    )
                }
                None => {
                    let c = cost.h2d_secs(DeviceId::Gpu, it.weight_bytes as f64);
                    (c, c)
                }
            };
            ItemCost {
                cpu,
                cpu_streaming,
                gpu: gpu_t,
                switch,
                copy,
                gpu_routed_copy,
            }
        })
        .collect()
}
