//! Errors of plan execution.

use ats_core::device::DeviceError;
use ats_core::ledger::OverBudget;

/// Why a round could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// A device failed (including a ledger refusing an allocation).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The plan does not fit the graph or the devices.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// A malformed round.
    #[error("invalid round: {0}")]
    Round(String),
    /// The context is full.
    #[error("the context is full: {needed} tokens needed, the KV cache holds {capacity}")]
    ContextFull {
        /// Tokens the round needs.
        needed: usize,
        /// KV capacity.
        capacity: usize,
    },
}

impl From<OverBudget> for ExecError {
    fn from(e: OverBudget) -> Self {
        ExecError::Device(DeviceError::OverBudget(e))
    }
}
