//! Session errors.

use crate::config::ConfigError;
use crate::exec::ExecError;
use crate::planner::PlanError;

/// Why a session could not load or run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Running a round failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The run configuration cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No plan fits.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The tokenizer in the model file is not usable.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] ats_core::TokenizerError),
    /// The KV pool has no room for the round (back-pressure: run fewer
    /// sequences, or end some).
    #[error(transparent)]
    PoolFull(#[from] super::kv_pool::PoolFull),
    /// The answer's grammar failed (a limit of the parser, or no token it
    /// allows among those the model can give).
    #[error(transparent)]
    Grammar(#[from] ats_core::grammar::GrammarError),
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
