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

/// Where a sequence's tokens live in a KV cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CacheRows {
    /// Token `t` in row `t` (one sequence owning the whole cache).
    #[default]
    Contiguous,
    /// Blocks of the cache's `block_tokens` rows each, in order: token `t`
    /// is in block `blocks[t / block_tokens]`, at row `t % block_tokens`.
    Blocks(Arc<[u32]>),
}

impl CacheRows {
    /// The cache row of the sequence's token `t`, with blocks of
    /// `block_tokens` rows (`None`: no block holds it).
    pub fn row(&self, t: usize, block_tokens: usize) -> Option<usize> {
        match self {
            CacheRows::Contiguous => Some(t),
            CacheRows::Blocks(b) => {
                let bt = block_tokens.max(1);
                b.get(t / bt).map(|&blk| blk as usize * bt + t % bt)
            }
        }
    }

    /// Tokens the rows can hold with blocks of `block_tokens` (`None`: no
    /// bound but the cache's).
    pub fn holds(&self, block_tokens: usize) -> Option<usize> {
        match self {
            CacheRows::Contiguous => None,
            CacheRows::Blocks(b) => Some(b.len() * block_tokens.max(1)),
        }
    }
}

/// One sequence's part of a round: its rows (consecutive), what it has in
/// the KV cache already, and where its cache rows are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqSpan {
    /// Its rows of the round.
    pub rows: std::ops::Range<usize>,
    /// Tokens of the sequence already in the cache before the round.
    pub past: usize,
    /// Where the sequence's tokens live in every layer's cache.
    pub cache: CacheRows,
}

impl SeqSpan {
    /// Rows of the round it has.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Keys its last row attends to: the past and its own rows.
    pub fn keys(&self) -> usize {
        self.past + self.rows.len()
    }
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
    /// The sequences the rows belong to, each attending over its own cache
    /// (causal within its own rows). Empty: the whole round is one sequence
    /// at `past`, in contiguous cache rows.
    pub seqs: Vec<SeqSpan>,
    /// Query rows per attention block (the Q chunk) for attention without a
    /// KV cache; 0 leaves it to the backend. Callers that know the memory
    /// budget (the vision encoder) choose it: scratch grows with it, and so
    /// does the reuse of each key/value block.
    pub attn_q_block: usize,
    /// Read back the final hidden states (the first input of the graph's
    /// last node, one row per output row: [`Graph::hidden_value`]) instead
    /// of the output, and skip that node (text embeddings).
    ///
    /// [`Graph::hidden_value`]: crate::graph::Graph::hidden_value
    pub hidden: bool,
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

    /// The shape costs depend on (with several sequences, the deepest one's past).
    pub fn shape(&self) -> crate::graph::cost::RoundShape {
        crate::graph::cost::RoundShape {
            n_tokens: self.n_rows,
            past: self.seqs.iter().map(|s| s.past).max().unwrap_or(self.past),
            n_outputs: self.output_rows.len(),
        }
    }

    /// The sequences of the round: [`Round::seqs`], or the whole round as
    /// one sequence at [`Round::past`] in contiguous rows.
    pub fn spans(&self) -> std::borrow::Cow<'_, [SeqSpan]> {
        if self.seqs.is_empty() {
            std::borrow::Cow::Owned(vec![SeqSpan {
                rows: 0..self.n_rows,
                past: self.past,
                cache: CacheRows::Contiguous,
            }])
        } else {
            std::borrow::Cow::Borrowed(&self.seqs)
        }
    }

    /// Checks that the sequences cover the rows in order, and that each
    /// one's cache rows hold its past and new tokens (blocks of
    /// `block_tokens` rows, `capacity` rows in all).
    pub fn check_spans(&self, block_tokens: usize, capacity: usize) -> Result<(), String> {
        let mut next = 0;
        for (i, s) in self.spans().iter().enumerate() {
            if s.rows.start != next || s.rows.end > self.n_rows || s.is_empty() {
                return Err(format!(
                    "sequence {i} has rows {:?}; they must follow row {next} within {} rows",
                    s.rows, self.n_rows
                ));
            }
            next = s.rows.end;
            let need = s.keys();
            let holds = s
                .cache
                .holds(block_tokens)
                .unwrap_or(capacity)
                .min(capacity);
            if need > holds {
                return Err(format!(
                    "sequence {i} needs {need} cache rows, its blocks hold {holds}"
                ));
            }
            if let CacheRows::Blocks(b) = &s.cache {
                let bt = block_tokens.max(1);
                let used = &b[..need.div_ceil(bt)];
                if let Some(&blk) = used.iter().find(|&&blk| (blk as usize + 1) * bt > capacity) {
                    return Err(format!(
                        "sequence {i} names cache block {blk}, beyond the cache's {}",
                        capacity / bt
                    ));
                }
            }
        }
        if next != self.n_rows {
            return Err(format!(
                "the sequences cover {next} of {} rows",
                self.n_rows
            ));
        }
        Ok(())
    }
}
