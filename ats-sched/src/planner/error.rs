//! Why no plan could be made.

use crate::config::ConfigError;
use crate::size::fmt_bytes;

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The GPU budget cannot hold even the smallest plan.
    #[error(
        "a GPU budget of {} is too small to run this model on the GPU: the smallest plan needs {} ({detail})",
        fmt_bytes(*budget), fmt_bytes(*minimum)
    )]
    BudgetTooSmall {
        /// The budget.
        budget: u64,
        /// The least that works.
        minimum: u64,
        /// What the minimum is made of.
        detail: String,
    },
    /// The run configuration cannot be planned for.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A planning algorithm refused its input.
    #[error("planning failed: {0}")]
    Algorithm(String),
}
