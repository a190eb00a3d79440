//! What the executor needs to know about a placement.

use serde::Serialize;

/// Where a weight lives between rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightHome {
    /// In host memory (the model mapping). CPU nodes read it in place; a GPU
    /// node that uses it streams it into a temp slot each round.
    Host,
    /// Uploaded once into device `0`'s resident region.
    Resident(usize),
}

/// A complete placement of one graph: the device of every node, the home of
/// every weight, the device of every KV cache. Device 0 is the host CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExecPlan {
    /// Device of each node.
    pub node_device: Vec<usize>,
    /// Home of each weight.
    pub weight_home: Vec<WeightHome>,
    /// Device of each KV cache.
    pub kv_device: Vec<usize>,
}

impl ExecPlan {
    /// Everything on the host CPU.
    pub fn all_cpu(g: &ats_core::graph::Graph) -> Self {
        ExecPlan {
            node_device: vec![0; g.nodes.len()],
            weight_home: vec![WeightHome::Host; g.weights.len()],
            kv_device: vec![0; g.kv_caches.len()],
        }
    }

    /// Number of device switches along the execution order.
    pub fn switches(&self) -> usize {
        self.node_device.windows(2).filter(|w| w[0] != w[1]).count()
    }
}

/// The role of a weight across layers (`blk.7.attn_q.weight` -> `attn_q.weight`):
/// streamed weights of one role share temp slots.
pub fn weight_role(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix("blk.") {
        if let Some(dot) = rest.find('.') {
            return &rest[dot + 1..];
        }
    }
    name
}
