//! The op graph: one description of a forward round, in execution order, that
//! any backend can run and any placement can split.
//!
//! Activations are f32 matrices `[rows, cols]`; the row count of most values
//! is the round's token count, so one graph serves every round and its costs
//! are functions of the token count ([`cost`]).

mod builder;
pub mod cost;
mod op;
mod roles;

pub use builder::GraphBuilder;
pub use cost::NodeCost;
pub use op::{
    AttnSpec, ExpertAct, Gating, GeluKind, Mask, Op, RopeKind, RopeSpec, Routing, Yarn,
    experts_chosen,
};
pub use roles::WeightRole;

use serde::Serialize;

use crate::dtype::DType;

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;
/// Index of a weight in [`Graph::weights`].
pub type WeightId = usize;
/// Index of a node in [`Graph::nodes`].
pub type NodeId = usize;

/// The part of a layer a node or weight belongs to. Placement items are the
/// weights of one (layer, sub-layer): tensors consumed together with no work
/// between them (q/k/v; an MoE operator's experts) are placed together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SubLayer {
    /// Token embedding lookup.
    Embed,
    /// Attention input norm and q/k/v projections (with biases, q/k norms, RoPE).
    AttnQkv,
    /// Attention itself (reads the KV cache).
    Attention,
    /// Attention output projection and residual.
    AttnOut,
    /// FFN norm and gate/up projections.
    FfnUp,
    /// FFN down projection and residual.
    FfnDown,
    /// MoE router (norm, gate_inp, top-k).
    MoeRouter,
    /// MoE routed experts.
    MoeExperts,
    /// Final norm and output projection.
    Output,
    /// Vision encoder blocks and merger.
    Vision,
}

/// Rows of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Rows {
    /// One row per token of the round.
    Tokens,
    /// One row per requested output (the round's `output_rows`).
    Outputs,
    /// A fixed count (vision graphs are built per image).
    Fixed(usize),
}

impl Rows {
    /// The row count for a round with `n_tokens` tokens and `n_outputs` outputs.
    pub fn resolve(self, n_tokens: usize, n_outputs: usize) -> usize {
        match self {
            Rows::Tokens => n_tokens,
            Rows::Outputs => n_outputs,
            Rows::Fixed(n) => n,
        }
    }
}

/// An activation: an f32 matrix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValueInfo {
    /// Name for debugging (`blk.3.attn_q`).
    pub name: String,
    /// Rows.
    pub rows: Rows,
    /// Columns.
    pub cols: usize,
}

/// A weight tensor the graph consumes, as stored in the model file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WeightInfo {
    /// Tensor name in the GGUF file.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// GGML dimensions, innermost first (`[in, out]` for a matrix, `[in, out, n_expert]` for experts).
    pub ne: Vec<usize>,
    /// Bytes of data.
    pub bytes: u64,
    /// Absolute offset of the data in the file.
    pub file_offset: u64,
    /// Layer, for per-layer tensors.
    pub layer: Option<usize>,
    /// The sub-layer that consumes it.
    pub sublayer: SubLayer,
}

impl WeightInfo {
    /// Elements per row (innermost dimension).
    pub fn cols(&self) -> usize {
        self.ne[0]
    }

    /// Rows of one matrix (second dimension, 1 for vectors).
    pub fn rows(&self) -> usize {
        self.ne.get(1).copied().unwrap_or(1)
    }

    /// Matrices stacked in the tensor (experts), 1 otherwise.
    pub fn n_mats(&self) -> usize {
        self.ne.iter().skip(2).product::<usize>().max(1)
    }
}

/// One operation of the round.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// Name for debugging and profiles (`blk.3.attn_q`).
    pub name: String,
    /// The operation.
    pub op: Op,
    /// Input activations.
    pub inputs: Vec<ValueId>,
    /// Output activation.
    pub output: ValueId,
    /// Weights consumed, in the op's order.
    pub weights: Vec<WeightId>,
    /// Layer, for per-layer nodes.
    pub layer: Option<usize>,
    /// Sub-layer.
    pub sublayer: SubLayer,
}

/// A KV cache the graph appends to: one per attention layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvCacheInfo {
    /// Layer.
    pub layer: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Columns per head.
    pub head_dim: usize,
}

impl KvCacheInfo {
    /// Columns of one row of K (and of V): `n_kv_heads * head_dim`.
    pub fn row_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

/// What the first value of the graph holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum GraphInput {
    /// Token ids (text models): the Embed node reads them from the round.
    Tokens,
    /// f32 rows supplied by the caller (vision pixel patches).
    Rows {
        /// Columns of each input row.
        cols: usize,
    },
}

/// A forward round in execution order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Graph {
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Activation values; value 0 is the graph input.
    pub values: Vec<ValueInfo>,
    /// Weights consumed by the nodes.
    pub weights: Vec<WeightInfo>,
    /// KV caches, indexed by [`AttnSpec::cache`].
    pub kv_caches: Vec<KvCacheInfo>,
    /// What value 0 holds.
    pub input: GraphInput,
    /// The value holding the result (logits, or image embeddings).
    pub output: ValueId,
}

impl Graph {
    /// The graph's last node and the value it reads first: for a language
    /// model, the output projection and the final (normed) hidden states of
    /// the output rows, which text embeddings are pooled from. `None` for a
    /// graph without nodes.
    pub fn hidden_value(&self) -> Option<(NodeId, ValueId)> {
        let last = self.nodes.len().checked_sub(1)?;
        let first_input = *self.nodes[last].inputs.first()?;
        Some((last, first_input))
    }

    /// The node that produces each value (`None` for the graph input).
    pub fn producers(&self) -> Vec<Option<NodeId>> {
        let mut p = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            p[n.output] = Some(i);
        }
        p
    }

    /// For each value, the index of the last node that reads it (`None` if unread).
    pub fn last_uses(&self) -> Vec<Option<NodeId>> {
        let mut last = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &v in &n.inputs {
                last[v] = Some(i);
            }
        }
        last
    }

    /// Total bytes of all weights.
    pub fn weight_bytes(&self) -> u64 {
        self.weights.iter().map(|w| w.bytes).sum()
    }

    /// Bytes of one value for a round.
    pub fn value_bytes(&self, v: ValueId, n_tokens: usize, n_outputs: usize) -> u64 {
        let info = &self.values[v];
        (info.rows.resolve(n_tokens, n_outputs) * info.cols * 4) as u64
    }

    /// Checks the graph's internal consistency: every input is produced
    /// before it is read, every weight and cache index exists.
    pub fn validate(&self) -> Result<(), String> {
        let mut ready = vec![false; self.values.len()];
        if !ready.is_empty() {
            ready[0] = true;
        }
        for n in &self.nodes {
            for &v in &n.inputs {
                if v >= ready.len() || !ready[v] {
                    return Err(format!("node {} reads value {v} before it exists", n.name));
                }
            }
            if n.weights.iter().any(|&w| w >= self.weights.len()) {
                return Err(format!("node {} names a missing weight", n.name));
            }
            if let Op::Attention(AttnSpec { cache: Some(c), .. }) = n.op
                && c >= self.kv_caches.len()
            {
                return Err(format!("node {} names missing KV cache {c}", n.name));
            }
            if n.output >= ready.len() || ready[n.output] {
                return Err(format!("node {} writes value {} twice", n.name, n.output));
            }
            ready[n.output] = true;
        }
        if self.output >= ready.len() || !ready[self.output] {
            return Err("the graph output is never produced".into());
        }
        Ok(())
    }
}
