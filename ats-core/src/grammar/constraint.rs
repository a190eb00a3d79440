//! One sequence's constraint: the mask before each sample, the advance
//! after it.

use llguidance::Matcher;

use super::GrammarError;

/// A grammar's state in one answer. Clone it to start another answer from
/// the same point.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Constraint(finished: {})", self.is_finished())
    }
}

impl Constraint {
    pub(super) fn new(matcher: Matcher) -> Constraint {
        Constraint { matcher }
    }

    /// Sets the logit of every token the grammar forbids next to `-inf`.
    /// End-of-generation tokens stay only where the grammar may end, and
    /// logits past the vocabulary (padding rows) are always forbidden.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = self.matcher.compute_mask().map_err(failed)?;
        for (i, l) in logits.iter_mut().enumerate() {
            if i >= allowed.len() || !allowed.is_allowed(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// Advances past `token`, which the last mask must have allowed (an
    /// end-of-generation token ends the grammar).
    pub fn accept(&mut self, token: u32) -> Result<(), GrammarError> {
        self.matcher.consume_token(token).map_err(failed)
    }

    /// Whether the grammar is complete and allows no further token: the
    /// answer is over.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether the grammar may end here.
    pub fn can_end(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}

fn failed(e: impl std::fmt::Display) -> GrammarError {
    GrammarError::Failed(e.to_string())
}
