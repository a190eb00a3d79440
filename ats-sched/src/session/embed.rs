//! Text embeddings: a prompt's final hidden states (the input of the
//! output projection, every row), pooled into one vector and L2-normalised,
//! as `/v1/embeddings` serves them. The prompt runs as a sequence of its
//! own, in chunks of the session's largest round, and leaves nothing in the
//! cache a later request could mistake for its own.

use serde::Serialize;

use super::sequences::{Logits, SeqInput};
use super::{Session, SessionError};

/// How a prompt's hidden states become one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean of every token's state.
    #[default]
    Mean,
    /// The last token's state (decoder embedding models: Qwen3-Embedding).
    Last,
    /// The first token's state (BERT's CLS position).
    Cls,
}

impl Pooling {
    /// Parses `mean`, `last` or `cls`.
    pub fn parse(s: &str) -> Result<Pooling, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "last" => Ok(Pooling::Last),
            "cls" => Ok(Pooling::Cls),
            _ => Err(format!("unknown pooling {s:?} (mean, last, cls)")),
        }
    }
}

impl Session {
    /// The embedding of `tokens`: their final hidden states pooled by
    /// `pooling`, with unit L2 norm (`n_embd` values).
    pub fn embed(&mut self, tokens: &[u32], pooling: Pooling) -> Result<Vec<f32>, SessionError> {
        if tokens.is_empty() {
            return Err(SessionError::Input("the input is empty".into()));
        }
        let seq = self.add_sequence();
        let states = self.hidden_states(seq, tokens);
        self.remove_sequence(seq);
        let states = states?;
        let d = self.spec.hp.n_embd;
        let mut v = pool(&states, d, pooling);
        normalize(&mut v);
        Ok(v)
    }

    /// Every token's final hidden state (`tokens.len() x n_embd`), fed in
    /// chunks to sequence `seq`.
    fn hidden_states(&mut self, seq: u64, tokens: &[u32]) -> Result<Vec<f32>, SessionError> {
        let chunk = self.max_round_tokens().max(1);
        let mut out = Vec::with_capacity(tokens.len() * self.spec.hp.n_embd);
        for part in tokens.chunks(chunk) {
            let input = SeqInput {
                seq,
                tokens: part,
                embeds: None,
                logits: Logits::All,
            };
            let plan = self.planner.plans().plan_for_round(part.len());
            out.extend(self.run_reading(&[input], plan, true)?.remove(0));
        }
        Ok(out)
    }
}

/// `rows` of width `d` pooled into one.
fn pool(rows: &[f32], d: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / d.max(1);
    match pooling {
        Pooling::Cls => rows[..d].to_vec(),
        Pooling::Last => rows[(n - 1) * d..n * d].to_vec(),
        Pooling::Mean => {
            let mut v = vec![0f64; d];
            for r in rows.chunks_exact(d) {
                for (a, &x) in v.iter_mut().zip(r) {
                    *a += f64::from(x);
                }
            }
            v.iter().map(|&a| (a / n as f64) as f32).collect()
        }
    }
}

/// Scales `v` to unit L2 norm (a zero vector stays zero).
fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    if norm > 0.0 {
        for x in v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_and_norm() {
        let rows = [1.0, 0.0, 3.0, 4.0];
        assert_eq!(pool(&rows, 2, Pooling::Cls), [1.0, 0.0]);
        assert_eq!(pool(&rows, 2, Pooling::Last), [3.0, 4.0]);
        assert_eq!(pool(&rows, 2, Pooling::Mean), [2.0, 2.0]);
        let mut v = vec![3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = vec![0.0; 3];
        normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
        assert_eq!(Pooling::parse("last"), Ok(Pooling::Last));
        assert!(Pooling::parse("max").is_err());
    }
}
