//! The session: a model loaded on a machine under a run configuration - its
//! one graph, the planner's layout and plans, the executor - with the state
//! of the sequence it runs (KV cache, position) and the generation loop.
//!
//! The data flow reads one way: the caller builds a [`RunConfig`] and a
//! [`Machine`]; [`Session::new`] plans (the [`Planner`]) and loads (the
//! [`Executor`]); each round, the planner picks the plan, the executor runs
//! it on the machine's devices, and the planner's proposed changes are
//! applied to the executor and committed.

mod breakdown;
pub mod decoder;
mod embed;
mod error;
mod generate;
pub mod kv_pool;
mod sequences;
mod single;
mod timings;

pub use breakdown::{BreakdownReport, DecodeBreakdown, DeviceShare, OpShare};
pub use embed::Pooling;
pub use error::SessionError;
pub use generate::{GenEvent, GenParams, Generation, StopReason};
pub use kv_pool::{KV_BLOCK_TOKENS, KvPool, PoolFull, PoolStats};
pub use sequences::{EmbedsPart, Logits, SeqEmbeds, SeqId, SeqInput, prompt_part};
pub use timings::Timings;

use std::collections::HashMap;

use std::sync::Arc;

use ats_core::chat::ChatTemplate;
use ats_core::device::HostMemory;
use ats_core::graph::Graph;
use ats_core::graph::cost::RoundShape;
use ats_core::machine::Machine;
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::Tokenizer;

use crate::config::RunConfig;
use crate::exec::{ExecError, Executor};
use crate::planner::{PlanChange, PlanSet, Planner};
use crate::profile::CostModel;

/// A model ready to run.
pub struct Session {
    spec: Arc<ModelSpec>,
    /// Shared: the scheduler and generation hold it across rounds that
    /// borrow the session mutably (a clone of the vocabulary took longer
    /// than a decode round).
    tokenizer: Result<Arc<Tokenizer>, String>,
    chat: Result<ChatTemplate, String>,
    executor: Executor,
    planner: Planner,
    run: RunConfig,
    /// The KV cache's blocks.
    pool: KvPool,
    /// The sequences alive.
    seqs: HashMap<SeqId, sequences::SeqState>,
    next_seq: SeqId,
    /// The sequence the one-sequence API ([`Session::prefill`], ...) runs.
    default_seq: SeqId,
    /// Decode rounds' times since the last reset.
    breakdown: DecodeBreakdown,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Session({:?}, {} sequences)",
            self.spec.arch,
            self.seqs.len()
        )
    }
}

impl Session {
    /// Plans `spec` on `machine` under `run` (with `cost` as the cost model)
    /// and loads it.
    pub fn new(
        spec: Arc<ModelSpec>,
        machine: Machine,
        cost: CostModel,
        run: RunConfig,
    ) -> Result<Session, SessionError> {
        run.validate()?;
        let planner = Planner::new(spec.graph().clone(), &machine, cost, &run)?;
        Session::with_planner(spec, machine, planner)
    }

    /// Loads `spec` on `machine` with a planner already made for it (tests
    /// and experiments that build the planner with their own cost model).
    pub fn with_planner(
        spec: Arc<ModelSpec>,
        machine: Machine,
        planner: Planner,
    ) -> Result<Session, SessionError> {
        let run = planner.run_config().clone();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        if let Some(gpu) = machine.gpu() {
            // page-lock the mapping where the device can use it for faster copies
            gpu.pin_host(&host).map_err(ExecError::from)?;
        }
        let set = planner.plans();
        let mut executor = Executor::new(
            spec.graph().clone(),
            host,
            machine,
            run.exec(),
            set.plans[0].clone(),
        )?;
        executor.set_plans(set.plans.clone())?;
        let tokenizer = Tokenizer::from_gguf(&spec.gguf.metadata)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        // kept with its reason: a template that does not compile is said
        // when a chat is asked for, not dropped
        let chat = ChatTemplate::from_gguf(&spec.gguf.metadata).map_err(|e| e.to_string());
        let mut session = Session {
            spec,
            tokenizer,
            chat,
            executor,
            planner,
            pool: KvPool::new(run.kv_rows(), run.kv_block_tokens),
            run,
            seqs: HashMap::new(),
            next_seq: 0,
            default_seq: 0,
            breakdown: DecodeBreakdown::default(),
        };
        session.default_seq = session.add_sequence();
        Ok(session)
    }

    /// The model.
    pub fn spec(&self) -> &Arc<ModelSpec> {
        &self.spec
    }

    /// The graph of a round.
    pub fn graph(&self) -> &Arc<Graph> {
        self.spec.graph()
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        self.executor.machine()
    }

    /// The run configuration.
    pub fn run_config(&self) -> &RunConfig {
        &self.run
    }

    /// The tokenizer, or why the file has none usable.
    pub fn tokenizer(&self) -> Result<&Tokenizer, SessionError> {
        self.shared_tokenizer_ref().map(|t| &**t)
    }

    /// The tokenizer as a shared handle, to hold while the session is
    /// borrowed mutably (cloning it copies a pointer, not the vocabulary).
    pub fn shared_tokenizer(&self) -> Result<Arc<Tokenizer>, SessionError> {
        self.shared_tokenizer_ref().cloned()
    }

    fn shared_tokenizer_ref(&self) -> Result<&Arc<Tokenizer>, SessionError> {
        self.tokenizer.as_ref().map_err(|e| {
            SessionError::Input(format!(
                "the model has no usable tokenizer ({e}); give token ids instead"
            ))
        })
    }

    /// The chat template (ChatML where the file has none, see
    /// [`ChatTemplate::is_fallback`]), or why the file's cannot be used.
    pub fn chat_template(&self) -> Result<&ChatTemplate, SessionError> {
        self.chat.as_ref().map_err(|e| {
            SessionError::Input(format!("the model's chat template cannot be used: {e}"))
        })
    }

    /// The executor (devices, ledgers, statistics).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Where the decode rounds since [`Session::reset_decode_breakdown`] spent
    /// their time.
    pub fn decode_breakdown(&self) -> &DecodeBreakdown {
        &self.breakdown
    }

    /// Starts a new [`Session::decode_breakdown`].
    pub fn reset_decode_breakdown(&mut self) {
        self.breakdown = DecodeBreakdown::default();
    }

    /// The planner and its current plans.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Context length.
    pub fn n_ctx(&self) -> usize {
        self.run.n_ctx
    }

    /// The current plan set.
    pub fn plan_set(&self) -> &PlanSet {
        self.planner.plans()
    }

    /// The most new tokens one round may carry: the largest tier the
    /// layout's compute buffers hold.
    pub fn max_round_tokens(&self) -> usize {
        let plans = self.planner.plans();
        let top = plans.tiers.last().map_or(1, |t| t.tier);
        top.min(plans.layout.max_tier.max(1)).max(1)
    }

    /// The KV pool's use.
    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Feeds the round's measurements to the planner and applies what it proposes.
    fn after_round(&mut self, shape: RoundShape) -> Result<(), SessionError> {
        let stats = self.executor.last_stats().clone();
        if shape.n_tokens == 1 {
            self.breakdown.add(self.spec.graph(), &stats);
        }
        match self.planner.observe(&stats, shape) {
            Some(change) => self.apply(change).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Gives `change`'s plans to the executor, then commits the change; when
    /// the executor refuses them, it goes back to the current plans and the
    /// planner counts the refusal (an error only if the executor cannot
    /// take its current plans back either). Returns whether it applied.
    fn apply(&mut self, change: PlanChange) -> Result<bool, SessionError> {
        match self.executor.set_plans(change.plans().to_vec()) {
            Ok(()) => {
                self.planner.commit(change);
                Ok(true)
            }
            Err(e) => {
                self.planner.reject(change, &e.to_string());
                self.executor
                    .set_plans(self.planner.plans().plans.clone())?;
                Ok(false)
            }
        }
    }

    /// Re-plans now with the live costs (as the load-aware re-scheduler would)
    /// and switches the executor to the new plans; the KV cache is kept.
    /// Returns whether a re-plan happened (none without a GPU).
    pub fn force_replan(&mut self) -> Result<bool, SessionError> {
        match self.planner.replan_now() {
            Some(change) => self.apply(change),
            None => Ok(false),
        }
    }

    /// Runs with the given plans (same layout) until the next re-plan: for
    /// experiments that measure plans the planner did not choose.
    pub fn set_plans_for_experiment(&mut self, set: PlanSet) -> Result<(), SessionError> {
        let change = self.planner.request(set);
        self.executor.set_plans(change.plans().to_vec())?;
        self.planner.commit(change);
        Ok(())
    }

    /// The machine's clock in seconds ([`Machine::now`]): the wall clock,
    /// or a machine model's virtual time.
    pub fn now(&self) -> f64 {
        self.executor.machine().now()
    }

    /// Milliseconds on the machine's clock since `t` (a [`Session::now`]).
    pub(crate) fn ms_since(&self, t: f64) -> f64 {
        (self.now() - t) * 1000.0
    }
}
