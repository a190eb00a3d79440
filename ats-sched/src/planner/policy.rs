//! What each policy may do: its residency rule, the plan shapes it allows
//! per tier, the layouts it considers and how it picks one. The planner
//! runs any of them; llama.cpp's baselines ([`super::baseline`]) are rules
//! like the others, not branches inside the planner.

use super::PlanKind;
use super::baseline;
use crate::config::Policy;

/// Which items stay resident on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Residency {
    /// The static placement DP (ATSInfer).
    StaticDp,
    /// llama.cpp's fill of whole layers from the last one.
    LayerFill {
        /// `--cpu-moe`: routed experts stay on the CPU.
        experts_on_cpu: bool,
    },
}

/// How a policy picks among the layouts that fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LayoutChoice {
    /// The layout whose reference workload is estimated fastest.
    Fastest,
    /// The layout for the largest batch, with temp slots if it has them
    /// (llama.cpp sizes its buffers for its batch and does not search).
    LargestBatch,
}

/// The plan shapes a policy allows for a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shapes {
    /// Non-resident items on the CPU, always.
    StaticOnly,
    /// Static or GPU-only per tier, and dynamic promotion if `dynamic`.
    PerTier { dynamic: bool },
    /// llama.cpp's rule ([`baseline::shapes`]).
    Baseline,
}

/// A policy's rules.
#[derive(Clone, Copy, Debug)]
pub(super) struct PolicyRules {
    /// Residency rule.
    pub residency: Residency,
    /// Largest tier (prompt chunk) planned, if the policy caps it.
    pub tier_cap: Option<usize>,
    /// Layouts considered: with temp slots (`true`) or without, in order.
    pub streaming: &'static [bool],
    /// How a layout is picked.
    pub choice: LayoutChoice,
    shapes: Shapes,
}

impl PolicyRules {
    /// The rules of `policy`.
    pub fn of(policy: Policy) -> PolicyRules {
        let searched = |residency, streaming, shapes| PolicyRules {
            residency,
            tier_cap: None,
            streaming,
            choice: LayoutChoice::Fastest,
            shapes,
        };
        match policy {
            Policy::Static => searched(Residency::StaticDp, &[false], Shapes::StaticOnly),
            Policy::Tiers => searched(
                Residency::StaticDp,
                &[false, true],
                Shapes::PerTier { dynamic: false },
            ),
            Policy::Ats => searched(
                Residency::StaticDp,
                &[false, true],
                Shapes::PerTier { dynamic: true },
            ),
            Policy::Layers | Policy::CpuMoe => PolicyRules {
                residency: Residency::LayerFill {
                    experts_on_cpu: policy == Policy::CpuMoe,
                },
                tier_cap: Some(baseline::UBATCH),
                streaming: &[true, false],
                choice: LayoutChoice::LargestBatch,
                shapes: Shapes::Baseline,
            },
        }
    }

    /// The shapes allowed for a tier in a layout with (`streaming`) or
    /// without temp slots; static is always among them.
    pub fn kinds(&self, tier: usize, streaming: bool) -> Vec<PlanKind> {
        match self.shapes {
            Shapes::StaticOnly => vec![PlanKind::Static],
            _ if !streaming => vec![PlanKind::Static],
            Shapes::PerTier { dynamic: false } => vec![PlanKind::Static, PlanKind::GpuOnly],
            Shapes::PerTier { dynamic: true } => {
                vec![PlanKind::Static, PlanKind::GpuOnly, PlanKind::Dynamic]
            }
            Shapes::Baseline => vec![baseline::shape(tier)],
        }
    }
}
