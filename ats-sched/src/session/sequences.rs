//! Many sequences in one session: each holds blocks of the KV pool and its
//! own position and history; a round carries the new tokens of several (a
//! prefill chunk of some, one decode token of others), each attending over
//! its own cache, every other op running on the whole round at once.

use std::sync::Arc;

use ats_core::round::{EmbedOverride, Positions, Round, SeqSpan};

use super::kv_pool::SeqBlocks;
use super::{Session, SessionError};

/// A sequence of a session.
pub type SeqId = u64;

/// One sequence's state.
#[derive(Debug, Default)]
pub(super) struct SeqState {
    pub blocks: SeqBlocks,
    /// The cache key of every token in the cache (token ids; image rows: a
    /// hash of their embedding).
    pub keys: Vec<u64>,
    /// The position the token after each one takes.
    pub next_pos: Vec<i64>,
    /// Token ids so far (repetition penalties).
    pub history: Vec<u32>,
}

impl SeqState {
    /// Tokens in the cache.
    pub fn tokens(&self) -> usize {
        self.keys.len()
    }

    /// The position the next text token takes.
    pub fn next_position(&self) -> i64 {
        self.next_pos.last().copied().unwrap_or(0)
    }
}

/// Which logits a sequence's rows of a round give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// None (a prefill chunk before the last only fills the cache).
    None,
    /// The last row's.
    Last,
    /// Every row's.
    All,
}

/// Image rows replacing some tokens' embeddings, and the M-RoPE positions
/// of the tokens.
#[derive(Clone, Copy, Debug)]
pub struct SeqEmbeds<'a> {
    /// Rows (of these tokens) and their embeddings.
    pub rows: &'a EmbedOverride,
    /// One position per token.
    pub positions: &'a Positions,
    /// The position the token after them takes, if not the largest
    /// position so far plus one.
    pub next_pos: Option<i64>,
}

/// One sequence's tokens for a round.
#[derive(Clone, Copy, Debug)]
pub struct SeqInput<'a> {
    /// The sequence.
    pub seq: SeqId,
    /// Its new tokens.
    pub tokens: &'a [u32],
    /// Image rows and explicit positions (`None`: text at the sequence's
    /// next positions).
    pub embeds: Option<SeqEmbeds<'a>>,
    /// Which logits to return.
    pub logits: Logits,
}

/// The cache key of a text token.
fn text_key(id: u32) -> u64 {
    u64::from(id)
}

/// The cache key of every token of a prompt: its id, or for an image row
/// its embedding.
fn prompt_keys(prompt: &[u32], images: Option<&EmbedOverride>) -> Vec<u64> {
    let Some(ov) = images.filter(|ov| !ov.rows.is_empty()) else {
        return prompt.iter().map(|&t| text_key(t)).collect();
    };
    let d = ov.data.len() / ov.rows.len();
    let mut image = ov.rows.iter().enumerate().peekable();
    prompt
        .iter()
        .enumerate()
        .map(|(i, &t)| match image.peek() {
            Some(&(k, &row)) if row == i && ov.data.len() >= (k + 1) * d => {
                image.next();
                row_key(&ov.data[k * d..(k + 1) * d])
            }
            _ => text_key(t),
        })
        .collect()
}

/// The cache key of an image row: its embedding, hashed (another image,
/// another key), marked apart from token ids.
fn row_key(row: &[f32]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for x in row {
        x.to_bits().hash(&mut h);
    }
    h.finish() | (1 << 63)
}

impl Session {
    /// A new, empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        let id = self.next_seq;
        self.next_seq += 1;
        self.seqs.insert(id, SeqState::default());
        id
    }

    /// A new sequence whose prompt will be `prompt`: it starts with the
    /// longest prefix of the prompt the KV pool still holds (in whole
    /// blocks, leaving at least the last token to run). Returns the sequence
    /// and how many prompt tokens it already has.
    pub fn add_sequence_for(&mut self, prompt: &[u32]) -> (SeqId, usize) {
        self.add_sequence_for_input(prompt, None)
    }

    /// [`Session::add_sequence_for`] for a prompt some of whose rows are
    /// image embeddings (`images`, rows numbered within the prompt): an image
    /// row's cache key is its embedding, so a prompt with the same image at
    /// the same place reuses its rows, and another image never does.
    pub fn add_sequence_for_input(
        &mut self,
        prompt: &[u32],
        images: Option<&EmbedOverride>,
    ) -> (SeqId, usize) {
        let keys = prompt_keys(prompt, images);
        let (blocks, next_pos) = self.pool.start(&keys, 1);
        let shared = blocks.tokens();
        let id = self.add_sequence();
        let s = self.seqs.get_mut(&id).expect("just added");
        s.blocks = blocks;
        s.keys = keys[..shared].to_vec();
        s.history = prompt[..shared].to_vec();
        // the positions inside the prefix only matter at its end, which the
        // pool recorded (M-RoPE positions after an image are not token counts)
        s.next_pos = (1..=shared as i64).collect();
        if let (Some(p), Some(last)) = (next_pos, s.next_pos.last_mut()) {
            *last = p;
        }
        (id, shared)
    }

    /// Prompt tokens [`Session::add_sequence_for_input`] would find cached
    /// now for `prompt` (nothing is taken).
    pub fn cached_prefix(&self, prompt: &[u32], images: Option<&EmbedOverride>) -> usize {
        self.pool.cached_tokens(&prompt_keys(prompt, images), 1)
    }

    /// Ends a sequence; its blocks go back to the pool (full ones stay
    /// cached for later prompts that start alike).
    pub fn remove_sequence(&mut self, id: SeqId) {
        if let Some(s) = self.seqs.remove(&id) {
            self.pool.release(s.blocks);
        }
    }

    /// Tokens sequence `id` has in the cache.
    pub fn seq_tokens(&self, id: SeqId) -> Option<usize> {
        self.seqs.get(&id).map(SeqState::tokens)
    }

    /// Sequence `id`'s tokens so far.
    pub fn seq_history(&self, id: SeqId) -> Option<&[u32]> {
        self.seqs.get(&id).map(|s| s.history.as_slice())
    }

    /// KV blocks sequence `id` must add to take `n` more tokens.
    pub fn blocks_to_add(&self, id: SeqId, n: usize) -> usize {
        self.seqs.get(&id).map_or(0, |s| {
            let have = s.blocks.blocks().len();
            self.pool.blocks_for(s.tokens() + n).saturating_sub(have)
        })
    }

    /// The most new tokens sequence `id` can take with `blocks` more blocks.
    pub fn tokens_in_blocks(&self, id: SeqId, blocks: usize) -> usize {
        self.seqs.get(&id).map_or(0, |s| {
            let room = (s.blocks.blocks().len() + blocks) * self.pool.block_tokens();
            room.saturating_sub(s.tokens())
        })
    }

    /// KV blocks a sequence could still take.
    pub fn free_blocks(&self) -> usize {
        self.pool.available()
    }

    /// The sequences alive.
    pub fn sequences(&self) -> usize {
        self.seqs.len()
    }

    /// Runs one round of `inputs` (at most one per sequence) and returns
    /// each input's logits (`vocab` per row asked for, in input order).
    pub fn run_batch(&mut self, inputs: &[SeqInput<'_>]) -> Result<Vec<Vec<f32>>, SessionError> {
        let n: usize = inputs.iter().map(|i| i.tokens.len()).sum();
        let plan = self.planner.plans().plan_for_round(n);
        self.run_batch_with(inputs, plan)
    }

    /// [`Session::run_batch`] with plan `plan`.
    pub(super) fn run_batch_with(
        &mut self,
        inputs: &[SeqInput<'_>],
        plan: usize,
    ) -> Result<Vec<Vec<f32>>, SessionError> {
        self.run_reading(inputs, plan, false)
    }

    /// [`Session::run_batch_with`]; with `hidden`, each row asked for gives
    /// its final hidden state (`n_embd` values) instead of its logits.
    pub(super) fn run_reading(
        &mut self,
        inputs: &[SeqInput<'_>],
        plan: usize,
        hidden: bool,
    ) -> Result<Vec<Vec<f32>>, SessionError> {
        self.check_inputs(inputs)?;
        for inp in inputs {
            let s = self.seqs.get_mut(&inp.seq).expect("checked above");
            let want = s.tokens() + inp.tokens.len();
            self.pool.reserve(&mut s.blocks, want)?;
        }
        let mut round = self.batch_round(inputs);
        round.hidden = hidden;
        let shape = round.shape();
        let round = Arc::new(round);
        let logits = split_logits(inputs, self.executor.run_with(&round, plan)?);
        self.after_round(shape)?;
        for (inp, span) in inputs.iter().zip(&round.seqs) {
            self.advance(inp, &round, span);
        }
        Ok(logits)
    }

    fn check_inputs(&self, inputs: &[SeqInput<'_>]) -> Result<(), SessionError> {
        if inputs.is_empty() {
            return Err(SessionError::Input(
                "a round needs at least one sequence".into(),
            ));
        }
        let vocab = self.spec.hp.n_vocab;
        for (i, inp) in inputs.iter().enumerate() {
            let s = self.seqs.get(&inp.seq).ok_or_else(|| {
                SessionError::Input(format!("sequence {} does not exist", inp.seq))
            })?;
            if inputs[..i].iter().any(|o| o.seq == inp.seq) {
                return Err(SessionError::Input(format!(
                    "sequence {} appears twice in one round",
                    inp.seq
                )));
            }
            if inp.tokens.is_empty() {
                return Err(SessionError::Input("the prompt is empty".into()));
            }
            if let Some(&bad) = inp.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(SessionError::Input(format!(
                    "token id {bad} is outside the vocabulary of {vocab}"
                )));
            }
            if let Some(e) = inp.embeds {
                check_embeds(
                    &e,
                    inp.tokens.len(),
                    self.spec.hp.n_embd,
                    mrope_components(self),
                )?;
            }
            if s.tokens() + inp.tokens.len() > self.run.n_ctx {
                return Err(SessionError::Input(format!(
                    "{} tokens do not fit the context: {} in use of {} (-c)",
                    inp.tokens.len(),
                    s.tokens(),
                    self.run.n_ctx
                )));
            }
        }
        Ok(())
    }

    /// The round of `inputs`: their tokens one after another, each with its
    /// positions, image rows, cache rows and output rows.
    fn batch_round(&self, inputs: &[SeqInput<'_>]) -> Round {
        let mrope = self.spec.arch.uses_mrope();
        let mut round = Round {
            positions: Positions {
                components: if mrope { 4 } else { 1 },
                data: Vec::new(),
            },
            ..Round::default()
        };
        let mut ov = EmbedOverride::default();
        for inp in inputs {
            let s = &self.seqs[&inp.seq];
            let start = round.n_rows;
            let n = inp.tokens.len();
            round.tokens.extend_from_slice(inp.tokens);
            match inp.embeds {
                Some(e) => {
                    round.positions.data.extend_from_slice(&e.positions.data);
                    let d = e.rows.data.len() / e.rows.rows.len().max(1);
                    ov.rows.extend(e.rows.rows.iter().map(|r| r + start));
                    ov.data
                        .extend_from_slice(&e.rows.data[..e.rows.rows.len() * d]);
                }
                None => {
                    let p = s.next_position().max(0) as usize;
                    let text = if mrope {
                        Positions::mrope_text(p, n)
                    } else {
                        Positions::linear(p, n)
                    };
                    round.positions.data.extend(text.data);
                }
            }
            let end = start + n;
            match inp.logits {
                Logits::None => {}
                Logits::Last => round.output_rows.push(end - 1),
                Logits::All => round.output_rows.extend(start..end),
            }
            round.seqs.push(SeqSpan {
                rows: start..end,
                past: s.tokens(),
                cache: s.blocks.cache_rows(),
            });
            round.n_rows = end;
        }
        if !ov.rows.is_empty() {
            round.embed_override = Some(ov);
        }
        if round.output_rows.is_empty() {
            // a round of intermediate chunks still computes one output row
            round.output_rows.push(round.n_rows - 1);
        }
        round
    }

    /// Records `inp`'s tokens as in the cache of its sequence.
    fn advance(&mut self, inp: &SeqInput<'_>, round: &Round, span: &SeqSpan) {
        let s = self
            .seqs
            .get_mut(&inp.seq)
            .expect("checked before the round");
        let comps = round.positions.components.max(1);
        let mut top = s.next_position() - 1;
        for (k, &t) in inp.tokens.iter().enumerate() {
            let row = span.rows.start + k;
            let key = match &round.embed_override {
                Some(ov) => match ov.rows.binary_search(&row) {
                    Ok(i) => {
                        let d = ov.data.len() / ov.rows.len();
                        row_key(&ov.data[i * d..(i + 1) * d])
                    }
                    Err(_) => text_key(t),
                },
                None => text_key(t),
            };
            s.keys.push(key);
            let pos = &round.positions.data[row * comps..(row + 1) * comps];
            top = top.max(pos.iter().copied().max().unwrap_or(0) as i64);
            s.next_pos.push(top + 1);
        }
        if let Some(after) = inp.embeds.and_then(|e| e.next_pos)
            && let Some(last) = s.next_pos.last_mut()
        {
            *last = after;
        }
        s.history.extend_from_slice(inp.tokens);
        self.pool.commit(&mut s.blocks, &s.keys, &s.next_pos);
    }
}

/// Each input's rows of the round's output.
fn split_logits(inputs: &[SeqInput<'_>], out: &[f32]) -> Vec<Vec<f32>> {
    let vocab = out.len() / inputs.iter().map(|i| rows_of(i)).sum::<usize>().max(1);
    let mut at = 0;
    inputs
        .iter()
        .map(|inp| {
            let n = rows_of(inp) * vocab;
            let v = out[at..at + n].to_vec();
            at += n;
            v
        })
        .collect()
}

/// Output rows an input asks for.
fn rows_of(inp: &SeqInput<'_>) -> usize {
    match inp.logits {
        Logits::None => 0,
        Logits::Last => 1,
        Logits::All => inp.tokens.len(),
    }
}

/// Position components per token of the session's model.
fn mrope_components(s: &Session) -> usize {
    if s.spec.arch.uses_mrope() { 4 } else { 1 }
}

/// Whether `e` fits `n` tokens of a model with embeddings of `n_embd` and
/// `comps` position components.
fn check_embeds(
    e: &SeqEmbeds<'_>,
    n: usize,
    n_embd: usize,
    comps: usize,
) -> Result<(), SessionError> {
    let bad = |m: String| Err(SessionError::Input(m));
    if e.positions.components != comps || e.positions.data.len() != n * comps {
        return bad(format!(
            "{} positions of {} components for {n} tokens; the model takes {comps} per token",
            e.positions.data.len(),
            e.positions.components
        ));
    }
    let sorted = e.rows.rows.windows(2).all(|w| w[0] < w[1]);
    if !sorted || e.rows.rows.last().is_some_and(|&r| r >= n) {
        return bad(format!(
            "image rows {:?} do not lie in order among {n} tokens",
            e.rows.rows
        ));
    }
    if e.rows.data.len() != e.rows.rows.len() * n_embd {
        return bad(format!(
            "{} image values for {} rows of {n_embd}",
            e.rows.data.len(),
            e.rows.rows.len()
        ));
    }
    Ok(())
}

/// One chunk's share of a prompt's image rows and positions.
pub struct EmbedsPart {
    rows: EmbedOverride,
    positions: Positions,
    next_pos: Option<i64>,
}

impl EmbedsPart {
    /// The part as a round input takes it.
    pub fn view(&self) -> SeqEmbeds<'_> {
        SeqEmbeds {
            rows: &self.rows,
            positions: &self.positions,
            next_pos: self.next_pos,
        }
    }
}

/// The image rows and positions of prompt tokens `start..end`, renumbered
/// from `start`; the last chunk carries the position after the prompt.
pub fn prompt_part(
    (ov, pos, after): (&EmbedOverride, &Positions, i64),
    start: usize,
    end: usize,
    last: bool,
) -> EmbedsPart {
    let c = pos.components;
    let mut rows = EmbedOverride::default();
    let d = ov.data.len() / ov.rows.len().max(1);
    for (k, &r) in ov.rows.iter().enumerate() {
        if (start..end).contains(&r) {
            rows.rows.push(r - start);
            rows.data.extend_from_slice(&ov.data[k * d..(k + 1) * d]);
        }
    }
    EmbedsPart {
        rows,
        positions: Positions {
            components: c,
            data: pos.data[start * c..end * c].to_vec(),
        },
        next_pos: last.then_some(after),
    }
}
