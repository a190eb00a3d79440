//! What the executor needs to know about a placement.

use std::borrow::Cow;

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

/// The role of a weight across layers (`blk.7.attn_q.weight` -> `attn_q.weight`,
/// `v.blk.7.attn_q.weight` -> `v.attn_q.weight`): streamed weights of one
/// role share temp slots.
pub fn weight_role(name: &str) -> Cow<'_, str> {
    let (prefix, rest) = match name.strip_prefix("blk.") {
        Some(rest) => ("", rest),
        None => match name.find(".blk.") {
            Some(i) => (&name[..i + 1], &name[i + 5..]),
            None => return Cow::Borrowed(name),
        },
    };
    match rest.split_once('.') {
        Some((layer, tail)) if !layer.is_empty() && layer.bytes().all(|b| b.is_ascii_digit()) => {
            if prefix.is_empty() {
                Cow::Borrowed(tail)
            } else {
                Cow::Owned(format!("{prefix}{tail}"))
            }
        }
        _ => Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests {
    use super::weight_role;

    #[test]
    fn roles_drop_the_layer_number() {
        assert_eq!(weight_role("blk.7.attn_q.weight"), "attn_q.weight");
        assert_eq!(weight_role("v.blk.12.ffn_up.bias"), "v.ffn_up.bias");
        assert_eq!(weight_role("token_embd.weight"), "token_embd.weight");
        assert_eq!(weight_role("mm.0.weight"), "mm.0.weight");
        assert_eq!(
            weight_role("v.blk.x.attn_q.weight"),
            "v.blk.x.attn_q.weight"
        );
    }
}
