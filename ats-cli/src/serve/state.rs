//! What the engine thread publishes between rounds for `/v1/ats/state`,
//! `/metrics` and the web page: where the model sits (the plan report: per
//! tensor on the GPU, streamed or on the CPU, and why), each device's
//! ledger by region against its budget, the KV pool, the last rounds (their
//! tokens, tier, plan and speed) and the re-plans. The engine thread owns
//! the session; readers take a copy of the last published state.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use ats_sched::planner::{PlanReport, ReplanStats};
use ats_sched::scheduler::RoundRecord;
use ats_sched::session::{PoolStats, Session};
use serde::Serialize;

/// Rounds kept for the page's history.
pub const ROUNDS_KEPT: usize = 120;

/// One device's memory: its ledger now.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceMemory {
    /// Role: `host` or `gpu`.
    pub role: String,
    /// The device's name.
    pub device: String,
    /// The budget (`None`: unbounded).
    pub budget_bytes: Option<u64>,
    /// Bytes held now.
    pub used_bytes: u64,
    /// The most held at once.
    pub peak_bytes: u64,
    /// Bytes held now, by ledger region (`resident`, `kv`, `temp`, ...).
    pub regions: Vec<(String, u64)>,
}

/// A round as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub struct RoundView {
    /// What it carried.
    #[serde(flatten)]
    pub round: RoundRecord,
    /// The tier whose plan ran it.
    pub tier: usize,
    /// That plan's shape (`gpu-only`, `static`, `dynamic`, `cpu-only`).
    pub plan: &'static str,
}

/// The KV pool now.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolView {
    /// Counts of blocks.
    #[serde(flatten)]
    pub stats: PoolStats,
    /// Tokens per block.
    pub block_tokens: usize,
}

/// The whole published state.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EngineState {
    /// The model's architecture and size.
    pub model: ModelView,
    /// The current plans, as a report (placement per tensor and item).
    pub plan: Option<PlanReport>,
    /// Memory per device.
    pub devices: Vec<DeviceMemory>,
    /// The KV pool.
    pub pool: PoolView,
    /// The last rounds, oldest first.
    pub rounds: VecDeque<RoundView>,
    /// Re-plans so far.
    pub replans: ReplanStats,
}

/// The model, for the page's title.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelView {
    /// GGUF architecture.
    pub arch: String,
    /// Blocks.
    pub n_layer: usize,
    /// File bytes.
    pub bytes: u64,
    /// Context tokens (shared by the sequences).
    pub n_ctx: usize,
    /// Sequences at once.
    pub parallel: usize,
    /// Whether chat messages may carry images (the server has `--mmproj`).
    pub images: bool,
}

/// The state shared between the engine thread and the handlers.
#[derive(Clone, Debug, Default)]
pub struct SharedState(Arc<Mutex<EngineState>>);

impl SharedState {
    /// The state before the first publication; `images` says whether the
    /// server reads images (the web page offers an upload when it does).
    pub fn new(images: bool) -> SharedState {
        let st = EngineState {
            model: ModelView {
                images,
                ..ModelView::default()
            },
            ..EngineState::default()
        };
        SharedState(Arc::new(Mutex::new(st)))
    }

    /// A copy of the last published state.
    pub fn get(&self) -> EngineState {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EngineState> {
        // whole assignments only: a panic elsewhere leaves it consistent
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the session's state, with `round` if one just ran.
    pub fn publish(&self, session: &Session, round: Option<RoundRecord>) {
        let mut st = self.lock();
        if st.plan.is_none() || st.replans != *session.planner().replan_stats() {
            st.plan = Some(session.planner().report());
            st.replans = session.planner().replan_stats().clone();
        }
        if st.model.n_layer == 0 {
            st.model = ModelView {
                images: st.model.images,
                ..model_view(session)
            };
        }
        st.devices = devices(session);
        st.pool = PoolView {
            stats: session.pool_stats(),
            block_tokens: session.run_config().kv_block_tokens,
        };
        if let Some(r) = round {
            let (tier, plan) = session
                .plan_set()
                .tier_for_round(r.tokens())
                .map_or((0, "none"), |t| (t.tier, t.kind.name()));
            st.rounds.push_back(RoundView {
                round: r,
                tier,
                plan,
            });
            while st.rounds.len() > ROUNDS_KEPT {
                st.rounds.pop_front();
            }
        }
    }
}

fn model_view(session: &Session) -> ModelView {
    let spec = session.spec();
    ModelView {
        arch: spec.arch.name().to_string(),
        n_layer: spec.hp.n_layer,
        bytes: spec.gguf.file_len(),
        n_ctx: session.n_ctx(),
        parallel: session.run_config().parallel,
        images: false,
    }
}

fn devices(session: &Session) -> Vec<DeviceMemory> {
    session
        .machine()
        .iter()
        .map(|(role, d)| {
            let s = d.ledger().snapshot();
            DeviceMemory {
                role: role.to_string(),
                device: s.device,
                budget_bytes: s.budget,
                used_bytes: s.used,
                peak_bytes: s.peak,
                regions: s
                    .used_by_region
                    .iter()
                    .map(|(r, b)| (r.name().to_string(), *b))
                    .collect(),
            }
        })
        .collect()
}
