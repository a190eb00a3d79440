//! Log-probabilities of sampled tokens, for OpenAI's `logprobs`.
//!
//! They are of the distribution the sampler was given: the softmax of the
//! model's logits at temperature 1 after a grammar's mask (a token the
//! grammar forbids has probability 0 and is never an alternative), before
//! penalties, top-k/top-p/min-p and temperature. That is OpenAI's meaning
//! (the model's own probabilities; llama-server's default too), and it stays
//! informative under greedy decoding, where the post-sampling distribution
//! would put probability 1 on every chosen token.

/// A sampled token's log-probability and the most likely alternatives.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenLogprob {
    /// The token.
    pub id: u32,
    /// Its natural log-probability.
    pub logprob: f32,
    /// The most likely tokens at that step with theirs, most likely first
    /// (ties by id).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprob {
    /// The log-probability of `id` under softmax(`logits`) and the `top` most
    /// likely tokens. NaN counts as `-inf`; a token of probability 0 has
    /// `-inf` (serialized by callers as they see fit).
    pub fn of(logits: &[f32], id: u32, top: usize) -> TokenLogprob {
        let clean = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { l };
        let max = logits
            .iter()
            .copied()
            .map(clean)
            .fold(f32::NEG_INFINITY, f32::max);
        let log_z = if max.is_finite() {
            let sum: f64 = logits
                .iter()
                .map(|&l| (f64::from(clean(l)) - f64::from(max)).exp())
                .sum();
            f64::from(max) + sum.ln()
        } else {
            // no finite logit: every probability is 0 (or undefined)
            f64::INFINITY
        };
        let lp = |l: f32| (f64::from(clean(l)) - log_z) as f32;
        let logprob = logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l));
        TokenLogprob {
            id,
            logprob,
            top: top_tokens(logits, top)
                .into_iter()
                .map(|(t, l)| (t, lp(l)))
                .collect(),
        }
    }
}

/// The `n` highest finite logits with their ids, highest first (ties by id).
fn top_tokens(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    if n == 0 {
        return Vec::new();
    }
    let mut c: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .filter(|(_, l)| l.is_finite())
        .map(|(i, &l)| (i as u32, l))
        .collect();
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if c.len() > n {
        c.select_nth_unstable_by(n - 1, order);
        c.truncate(n);
    }
    c.sort_unstable_by(order);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_of_the_softmax() {
        let logits = [
            0.0f32,
            2.0f32.ln(),
            f32::NEG_INFINITY,
            f32::NAN,
            1.0f32.ln(),
        ];
        // probabilities 1/4, 2/4, 0, 0, 1/4
        let t = TokenLogprob::of(&logits, 0, 3);
        assert!((t.logprob - 0.25f32.ln()).abs() < 1e-6, "{t:?}");
        let ids: Vec<u32> = t.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, [1, 0, 4]);
        assert!((t.top[0].1 - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(TokenLogprob::of(&logits, 2, 0).logprob, f32::NEG_INFINITY);
        assert!(TokenLogprob::of(&logits, 2, 0).top.is_empty());
        // more alternatives asked than tokens with a probability
        assert_eq!(TokenLogprob::of(&logits, 1, 20).top.len(), 3);
        // nothing finite: nothing has a probability, nothing panics
        let none = TokenLogprob::of(&[f32::NEG_INFINITY; 3], 0, 2);
        assert_eq!(none.logprob, f32::NEG_INFINITY);
        assert!(none.top.is_empty());
        assert_eq!(TokenLogprob::of(&[], 5, 2).logprob, f32::NEG_INFINITY);
    }
}
