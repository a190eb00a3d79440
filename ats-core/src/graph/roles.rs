//! Weight roles: the same tensor of every layer (`blk.N.attn_q.weight` for
//! each N). Streamed weights of one role take turns in the same temp slots,
//! so a role is the unit that slot plans are keyed by.

use serde::Serialize;

use super::{Graph, SubLayer};

/// A weight's role across layers: its sub-layer and its position among the
/// weights of that (layer, sub-layer), in the order the graph registered
/// them. Weights outside the layers (`per_layer: false`) have roles of
/// their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct WeightRole {
    /// Whether the weight belongs to a numbered layer.
    pub per_layer: bool,
    /// Its sub-layer.
    pub sublayer: SubLayer,
    /// Its position among the weights of its (layer, sub-layer).
    pub position: usize,
}

impl Graph {
    /// The role of every weight, indexed by weight id.
    pub fn weight_roles(&self) -> Vec<WeightRole> {
        let mut seen: std::collections::HashMap<(Option<usize>, SubLayer), usize> =
            std::collections::HashMap::new();
        self.weights
            .iter()
            .map(|w| {
                let n = seen.entry((w.layer, w.sublayer)).or_default();
                *n += 1;
                WeightRole {
                    per_layer: w.layer.is_some(),
                    sublayer: w.sublayer,
                    position: *n - 1,
                }
            })
            .collect()
    }
}
