//! Building a graph node by node, with the helpers model files use.

use super::*;

/// Builds a [`Graph`] in execution order.
#[derive(Debug)]
pub struct GraphBuilder {
    graph: Graph,
    layer: Option<usize>,
    sublayer: SubLayer,
}

impl GraphBuilder {
    /// A graph whose value 0 is the input.
    pub fn new(input: GraphInput) -> Self {
        let (rows, cols) = match input {
            GraphInput::Tokens => (Rows::Tokens, 1),
            GraphInput::Rows { cols } => (Rows::Tokens, cols),
        };
        GraphBuilder {
            graph: Graph {
                nodes: Vec::new(),
                values: vec![ValueInfo {
                    name: "input".into(),
                    rows,
                    cols,
                }],
                weights: Vec::new(),
                kv_caches: Vec::new(),
                input,
                output: 0,
            },
            layer: None,
            sublayer: SubLayer::Embed,
        }
    }

    /// The graph input value.
    pub fn input(&self) -> ValueId {
        0
    }

    /// Sets the layer and sub-layer recorded on the nodes that follow.
    pub fn at(&mut self, layer: Option<usize>, sublayer: SubLayer) -> &mut Self {
        self.layer = layer;
        self.sublayer = sublayer;
        self
    }

    /// Registers a weight; it takes the current sub-layer and layer.
    pub fn weight(&mut self, mut w: WeightInfo) -> WeightId {
        if let Some(i) = self.graph.weights.iter().position(|x| x.name == w.name) {
            return i;
        }
        w.layer = self.layer;
        w.sublayer = self.sublayer;
        self.graph.weights.push(w);
        self.graph.weights.len() - 1
    }

    /// Moves an already registered weight to the current layer and sub-layer
    /// (a tied embedding whose main consumer is the output projection).
    pub fn retag_weight(&mut self, w: WeightId) {
        self.graph.weights[w].layer = self.layer;
        self.graph.weights[w].sublayer = self.sublayer;
    }

    /// Registers a KV cache and returns its index.
    pub fn kv_cache(&mut self, info: KvCacheInfo) -> usize {
        self.graph.kv_caches.push(info);
        self.graph.kv_caches.len() - 1
    }

    /// Columns of a value.
    pub fn cols(&self, v: ValueId) -> usize {
        self.graph.values[v].cols
    }

    /// Rows of a value.
    pub fn rows(&self, v: ValueId) -> Rows {
        self.graph.values[v].rows
    }

    /// The weight's info.
    pub fn weight_info(&self, w: WeightId) -> &WeightInfo {
        &self.graph.weights[w]
    }

    /// Appends a node producing a new value of `rows x cols`.
    pub fn node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: &[ValueId],
        weights: &[WeightId],
        rows: Rows,
        cols: usize,
    ) -> ValueId {
        let name = name.into();
        let out = self.graph.values.len();
        self.graph.values.push(ValueInfo {
            name: name.clone(),
            rows,
            cols,
        });
        self.graph.nodes.push(Node {
            name,
            op,
            inputs: inputs.to_vec(),
            output: out,
            weights: weights.to_vec(),
            layer: self.layer,
            sublayer: self.sublayer,
        });
        out
    }

    /// `x W^T + b`; the output width is the weight's row count.
    pub fn matmul(&mut self, name: &str, x: ValueId, w: WeightId, b: Option<WeightId>) -> ValueId {
        let out = self.graph.weights[w].rows();
        let ws: Vec<WeightId> = std::iter::once(w).chain(b).collect();
        let rows = self.rows(x);
        self.node(name, Op::MatMul, &[x], &ws, rows, out)
    }

    /// RMSNorm of each `group` columns.
    pub fn rms_norm(
        &mut self,
        name: &str,
        x: ValueId,
        w: WeightId,
        eps: f32,
        group: usize,
    ) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        self.node(name, Op::RmsNorm { eps, group }, &[x], &[w], rows, cols)
    }

    /// LayerNorm with weight and bias.
    pub fn layer_norm(
        &mut self,
        name: &str,
        x: ValueId,
        w: WeightId,
        b: WeightId,
        eps: f32,
    ) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        self.node(name, Op::LayerNorm { eps }, &[x], &[w, b], rows, cols)
    }

    /// Element-wise sum.
    pub fn add(&mut self, name: &str, a: ValueId, b: ValueId) -> ValueId {
        let (rows, cols) = (self.rows(a), self.cols(a));
        self.node(name, Op::Add, &[a, b], &[], rows, cols)
    }

    /// Rotary embedding, with optional frequency factors.
    pub fn rope(
        &mut self,
        name: &str,
        x: ValueId,
        spec: RopeSpec,
        freqs: Option<WeightId>,
    ) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        let ws: Vec<WeightId> = freqs.into_iter().collect();
        self.node(name, Op::Rope(spec), &[x], &ws, rows, cols)
    }

    /// Attention over q, k, v, with per-head sink logits when `sinks` is
    /// given (the spec's `sinks` flag follows it).
    pub fn attention(
        &mut self,
        name: &str,
        [q, k, v]: [ValueId; 3],
        mut spec: AttnSpec,
        sinks: Option<WeightId>,
    ) -> ValueId {
        let rows = self.rows(q);
        let cols = spec.n_heads * spec.head_dim;
        spec.sinks = sinks.is_some();
        let ws: Vec<WeightId> = sinks.into_iter().collect();
        self.node(name, Op::Attention(spec), &[q, k, v], &ws, rows, cols)
    }

    /// `silu(gate) * up`.
    pub fn swiglu(&mut self, name: &str, gate: ValueId, up: ValueId) -> ValueId {
        let (rows, cols) = (self.rows(gate), self.cols(gate));
        self.node(name, Op::SwiGlu, &[gate, up], &[], rows, cols)
    }

    /// GELU.
    pub fn gelu(&mut self, name: &str, x: ValueId, kind: GeluKind) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        self.node(name, Op::Gelu(kind), &[x], &[], rows, cols)
    }

    /// Squared ReLU.
    pub fn relu_sqr(&mut self, name: &str, x: ValueId) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        self.node(name, Op::ReluSqr, &[x], &[], rows, cols)
    }

    /// Strided column blocks of each row (see [`Op::GatherCols`]).
    pub fn gather_cols(
        &mut self,
        name: &str,
        x: ValueId,
        offset: usize,
        len: usize,
        stride: usize,
        blocks: usize,
    ) -> ValueId {
        let rows = self.rows(x);
        let op = Op::GatherCols {
            offset,
            len,
            stride,
            blocks,
        };
        self.node(name, op, &[x], &[], rows, blocks * len)
    }

    /// Reorders groups of `group` rows: `out group i = in group perm[i]`.
    pub fn permute_rows(
        &mut self,
        name: &str,
        x: ValueId,
        group: usize,
        perm: Vec<u32>,
    ) -> ValueId {
        let (rows, cols) = (self.rows(x), self.cols(x));
        self.node(name, Op::PermuteRows { group, perm }, &[x], &[], rows, cols)
    }

    /// `[rows, cols]` as `[rows / factor, cols * factor]`; `rows` is the merged row count.
    pub fn merge_rows(&mut self, name: &str, x: ValueId, factor: usize, rows: Rows) -> ValueId {
        let cols = self.cols(x) * factor;
        self.node(name, Op::MergeRows { factor }, &[x], &[], rows, cols)
    }

    /// Marks the graph's result and returns the graph, checked.
    pub fn finish(mut self, output: ValueId) -> Graph {
        self.graph.output = output;
        debug_assert_eq!(self.graph.validate(), Ok(()));
        self.graph
    }
}
