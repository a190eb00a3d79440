//! Temp slots: the GPU buffers streamed weights take turns in. One rule,
//! used by the planner (to size the temp region), the executor (to assign
//! and allocate the slots) and the vision encoder (to plan an image): per
//! weight role, up to `depth` slots (2 = double buffering), each as large as
//! the role's largest streamed weight; the k-th streamed weight of a role,
//! in order of use, takes the role's slot `k mod depth`.

use std::collections::HashMap;

use ats_core::graph::{Graph, WeightId, WeightRole};
use serde::Serialize;

/// A slot: the `turn`-th of its role's slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SlotKey {
    /// The role whose weights use the slot.
    pub role: WeightRole,
    /// Which of the role's slots (0 up to the depth).
    pub turn: usize,
}

/// The slots of a set of streamed weights and which weight goes where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotPlan {
    /// Each slot's key and bytes.
    pub slots: Vec<(SlotKey, u64)>,
    /// The slot index of each streamed weight.
    pub slot_of: HashMap<WeightId, usize>,
    /// Per slot, its weights in order of use.
    pub queue: Vec<Vec<WeightId>>,
}

impl SlotPlan {
    /// The slots of `streamed` (weights of `g`, in order of use; repeats
    /// ignored) with `depth` slots per role at most.
    pub fn new(g: &Graph, streamed: &[WeightId], depth: usize) -> SlotPlan {
        let roles = g.weight_roles();
        let depth = depth.max(1);
        let mut role_bytes: HashMap<WeightRole, u64> = HashMap::new();
        for &w in streamed {
            let b = role_bytes.entry(roles[w]).or_default();
            *b = (*b).max(g.weights[w].bytes);
        }
        let mut plan = SlotPlan::default();
        let mut index: HashMap<SlotKey, usize> = HashMap::new();
        let mut uses: HashMap<WeightRole, usize> = HashMap::new();
        for &w in streamed {
            if plan.slot_of.contains_key(&w) {
                continue;
            }
            let role = roles[w];
            let n = uses.entry(role).or_default();
            let key = SlotKey {
                role,
                turn: *n % depth,
            };
            *n += 1;
            let s = *index.entry(key).or_insert_with(|| {
                plan.slots.push((key, role_bytes[&role]));
                plan.queue.push(Vec::new());
                plan.slots.len() - 1
            });
            plan.queue[s].push(w);
            plan.slot_of.insert(w, s);
        }
        plan
    }

    /// Bytes of every slot together.
    pub fn total_bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.1).sum()
    }

    /// Roles that stream at least one weight.
    pub fn roles(&self) -> usize {
        let mut r: Vec<WeightRole> = self.slots.iter().map(|s| s.0.role).collect();
        r.sort();
        r.dedup();
        r.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ats_core::dtype::DType;
    use ats_core::graph::{GraphBuilder, GraphInput, SubLayer, WeightInfo};

    /// Three layers of one FFN weight (the middle one smaller) and an output weight.
    fn graph() -> Graph {
        let mut b = GraphBuilder::new(GraphInput::Rows { cols: 8 });
        let mut x = 0;
        for (l, rows) in [(0, 8), (1, 4), (2, 8)] {
            b.at(Some(l), SubLayer::FfnUp);
            let w = b.weight(WeightInfo {
                name: format!("blk.{l}.ffn_up.weight"),
                dtype: DType::F32,
                ne: vec![8, rows],
                bytes: (32 * rows) as u64,
                file_offset: 0,
                layer: None,
                sublayer: SubLayer::FfnUp,
            });
            x = b.matmul("up", x, w, None);
            if rows != 8 {
                let back = b.weight(WeightInfo {
                    name: format!("blk.{l}.ffn_down.weight"),
                    dtype: DType::F32,
                    ne: vec![rows, 8],
                    bytes: (32 * rows) as u64,
                    file_offset: 0,
                    layer: None,
                    sublayer: SubLayer::FfnUp,
                });
                x = b.matmul("down", x, back, None);
            }
        }
        b.finish(x)
    }

    #[test]
    fn weights_of_a_role_take_turns_in_slots_of_the_roles_largest_size() {
        let g = graph();
        // weights: 0 = blk.0 up (256 B), 1 = blk.1 up (128 B), 2 = blk.1 down, 3 = blk.2 up
        let p = SlotPlan::new(&g, &[0, 1, 2, 3], 2);
        let up = |turn| SlotKey {
            role: g.weight_roles()[0],
            turn,
        };
        assert_eq!(p.slots[0], (up(0), 256));
        assert_eq!(
            p.slots[1],
            (up(1), 256),
            "sized for the role, not its weight"
        );
        assert_eq!(p.slot_of[&0], 0);
        assert_eq!(p.slot_of[&1], 1);
        assert_eq!(
            p.slot_of[&3], 0,
            "the third use comes back to the first slot"
        );
        assert_eq!(p.queue[0], vec![0, 3]);
        // blk.1's second weight is the role at position 1: a slot of its own
        assert_eq!(p.slot_of[&2], 2);
        assert_eq!(p.total_bytes(), 256 + 256 + 128);
        assert_eq!(p.roles(), 2);
        // one slot per role at depth 1, and repeats ignored
        let single = SlotPlan::new(&g, &[0, 0, 1, 3], 1);
        assert_eq!(single.slots.len(), 1);
        assert_eq!(single.queue[0], vec![0, 1, 3]);
    }
}
