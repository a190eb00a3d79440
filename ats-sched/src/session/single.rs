//! The one-sequence API (`run`, `chat`, `eval`, `perplexity`, `vlm`): the
//! session's default sequence, prompts in chunks of the tier choice.

use ats_core::round::{EmbedOverride, Positions};

use super::sequences::{EmbedsPart, Logits, SeqInput, SeqState, prompt_part};
use super::{Session, SessionError};

impl Session {
    fn default_state(&self) -> &SeqState {
        &self.seqs[&self.default_seq]
    }

    /// Tokens of the default sequence in the KV cache.
    pub fn past(&self) -> usize {
        self.default_state().tokens()
    }

    /// The next position a text token of the default sequence takes.
    pub fn next_pos(&self) -> i64 {
        self.default_state().next_position()
    }

    /// The default sequence's tokens so far.
    pub fn history(&self) -> &[u32] {
        &self.default_state().history
    }

    /// Forgets the default sequence (its blocks go back to the pool).
    pub fn reset(&mut self) {
        self.remove_sequence(self.default_seq);
        self.default_seq = self.add_sequence();
    }

    /// Processes `tokens` in chunks (the tier choice) and returns the logits
    /// of the last one (`all`: of every one, `tokens.len() x vocab`).
    pub fn prefill(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>, SessionError> {
        self.prefill_with(tokens, all, None)
    }

    /// [`Session::prefill`] with rows of the embedding output replaced
    /// (image embeddings) and explicit positions (M-RoPE), both covering
    /// `tokens`, and the position the token after them takes.
    pub fn prefill_with(
        &mut self,
        tokens: &[u32],
        all: bool,
        embeds: Option<(&EmbedOverride, &Positions, i64)>,
    ) -> Result<Vec<f32>, SessionError> {
        if tokens.is_empty() {
            return Err(SessionError::Input("the prompt is empty".into()));
        }
        if self.past() + tokens.len() > self.run.n_ctx {
            return Err(SessionError::Input(format!(
                "{} tokens do not fit the context: {} in use of {} (-c)",
                tokens.len(),
                self.past(),
                self.run.n_ctx
            )));
        }
        if let Some((_, pos, _)) = embeds
            && pos.data.len() != tokens.len() * pos.components
        {
            return Err(SessionError::Input(format!(
                "{} position values of {} components for {} tokens",
                pos.data.len(),
                pos.components,
                tokens.len()
            )));
        }
        let mut out = Vec::new();
        let mut start = 0;
        while start < tokens.len() {
            let (plan, chunk) = self.planner.choose(tokens.len() - start);
            let chunk = chunk.min(self.run.max_chunk.unwrap_or(usize::MAX)).max(1);
            let end = (start + chunk).min(tokens.len());
            let last = end == tokens.len();
            let part = embeds.map(|e| prompt_part(e, start, end, last));
            let input = SeqInput {
                seq: self.default_seq,
                tokens: &tokens[start..end],
                embeds: part.as_ref().map(EmbedsPart::view),
                logits: match (all, last) {
                    (true, _) => Logits::All,
                    (false, true) => Logits::Last,
                    (false, false) => Logits::None,
                },
            };
            let logits = self.run_batch_with(&[input], plan)?.remove(0);
            if all {
                out.extend_from_slice(&logits);
            } else if last {
                out = logits;
            }
            start = end;
        }
        Ok(out)
    }

    /// Feeds one token and returns the next logits.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, SessionError> {
        self.prefill(&[token], false)
    }

    /// Logits for every position of `tokens` from an empty context.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SessionError> {
        self.reset();
        self.prefill(tokens, true)
    }
}
