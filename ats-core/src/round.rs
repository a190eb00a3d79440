//! The per-round inputs of a graph: tokens, positions, past length, outputs.

use std::sync::Arc;

/// The longest context any round can address: positions are `i32`, as in
/// GGUF-era engines, so a context holds at most `i32::MAX` tokens.
pub const MAX_CONTEXT: usize = i32::MAX as usize;

/// Positions of the round's rows, `components` integers per row
/// (1 for text RoPE, 4 for M-RoPE t/h/w/extra, 2 for vision row/column).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Positions {
    /// Integers per row.
    pub components: usize,
    /// `data[row * components + c]`.
    pub data: Vec<i32>,
}

impl Positions {
    /// Consecutive text positions `start..start + n`.
    pub fn linear(start: usize, n: usize) -> Self {
        Positions {
            components: 1,
            data: (start..start + n).map(|p| p as i32).collect(),
        }
    }

    /// The same position in each of 4 M-RoPE sections, for `start..start+n`.
    pub fn mrope_text(start: usize, n: usize) -> Self {
        Positions {
            components: 4,
            data: (start..start + n)
                .flat_map(|p| [p as i32, p as i32, p as i32, 0])
                .collect(),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len() / self.components.max(1)
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Component `c` of row `row`.
    pub fn get(&self, row: usize, c: usize) -> i32 {
        self.data[row * self.components + c]
    }
}

/// Rows of the embedding output replaced by caller-supplied vectors (image embeddings).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EmbedOverride {
    /// Row indices in the round, ascending.
    pub rows: Vec<usize>,
    /// `rows.len() * n_embd` values.
    pub data: Vec<f32>,
}

/// Everything a forward round needs besides the graph and the weights.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Round {
    /// Token ids (text graphs).
    pub tokens: Vec<u32>,
    /// Input rows (graphs whose input is f32 rows: the vision encoder).
    pub input_rows: Option<Arc<Vec<f32>>>,
    /// Row count of the round.
    pub n_rows: usize,
    /// Positions per row.
    pub positions: Positions,
    /// Tokens already in the KV cache.
    pub past: usize,
    /// Rows whose output is wanted, ascending.
    pub output_rows: Vec<usize>,
    /// Embedding rows replaced by the caller.
    pub embed_override: Option<EmbedOverride>,
    /// Segment boundaries for [`crate::graph::Mask::Segments`] attention: cumulative row counts, starting at 0.
    pub segments: Vec<usize>,
    /// Query rows per attention block (the Q chunk) for attention without a
    /// KV cache; 0 leaves it to the backend. Callers that know the memory
    /// budget (the vision encoder) choose it: scratch grows with it, and so
    /// does the reuse of each key/value block.
    pub attn_q_block: usize,
}

impl Round {
    /// A text round: `tokens` at positions `past..`, logits for the last row only
    /// (`all_logits` asks for every row).
    pub fn text(tokens: Vec<u32>, past: usize, all_logits: bool) -> Self {
        let n = tokens.len();
        Round {
            n_rows: n,
            positions: Positions::linear(past, n),
            past,
            output_rows: if all_logits {
                (0..n).collect()
            } else {
                n.checked_sub(1).into_iter().collect()
            },
            tokens,
            ..Round::default()
        }
    }

    /// The shape costs depend on.
    pub fn shape(&self) -> crate::graph::cost::RoundShape {
        crate::graph::cost::RoundShape {
            n_tokens: self.n_rows,
            past: self.past,
            n_outputs: self.output_rows.len(),
        }
    }
}
