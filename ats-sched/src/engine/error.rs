//! Engine errors.

use crate::exec::ExecError;

/// Why the engine could not load or run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Running a round failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The model file is not usable.
    #[error(transparent)]
    Spec(#[from] ats_core::spec::SpecError),
    /// The tokenizer in the model file is not usable.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] ats_core::TokenizerError),
    /// No plan fits the budget.
    #[error("{0}")]
    Plan(String),
    /// A bad request (empty prompt, prompt over the context, ...).
    #[error("{0}")]
    Input(String),
    /// The model computed NaN logits (NaN or infinite weights, or an overflow):
    /// nothing can be sampled from them, and sampling anyway would emit garbage.
    #[error(
        "the model produced NaN logits after {position} tokens (NaN weights in the file, or an overflow)"
    )]
    NonFiniteLogits {
        /// Tokens in the context when the logits were computed.
        position: usize,
    },
}
