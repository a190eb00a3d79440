//! What the executor needs to know about a placement.

use ats_core::machine::DeviceId;
use serde::Serialize;

/// Where a weight lives between rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightHome {
    /// In host memory (the model mapping). CPU nodes read it in place; a GPU
    /// node that uses it streams it into a temp slot each round.
    Host,
    /// Uploaded once into the GPU's resident region.
    Resident,
}

/// A complete placement of one graph: the device of every node, the home of
/// every weight, the device of every KV cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExecPlan {
    /// Device of each node.
    pub node_device: Vec<DeviceId>,
    /// Home of each weight.
    pub weight_home: Vec<WeightHome>,
    /// Device of each KV cache.
    pub kv_device: Vec<DeviceId>,
}

impl ExecPlan {
    /// Everything on the host CPU.
    pub fn all_cpu(g: &ats_core::graph::Graph) -> Self {
        ExecPlan {
            node_device: vec![DeviceId::Host; g.nodes.len()],
            weight_home: vec![WeightHome::Host; g.weights.len()],
            kv_device: vec![DeviceId::Host; g.kv_caches.len()],
        }
    }

    /// Number of device switches along the execution order.
    pub fn switches(&self) -> usize {
        self.node_device.windows(2).filter(|w| w[0] != w[1]).count()
    }

    /// Whether the plan uses the GPU at all (a node, a weight or a cache there).
    pub fn uses_gpu(&self) -> bool {
        self.node_device
            .iter()
            .chain(&self.kv_device)
            .any(|&d| d == DeviceId::Gpu)
            || self.weight_home.contains(&WeightHome::Resident)
    }
}
