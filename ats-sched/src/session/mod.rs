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
mod error;
mod generate;
mod timings;

pub use breakdown::{BreakdownReport, DecodeBreakdown, DeviceShare, OpShare};
pub use error::SessionError;
pub use generate::{GenEvent, GenParams, Generation, StopReason};
pub use timings::Timings;

use std::sync::Arc;
use std::time::Instant;

use ats_core::chat::ChatTemplate;
use ats_core::device::HostMemory;
use ats_core::graph::Graph;
use ats_core::graph::cost::RoundShape;
use ats_core::machine::Machine;
use ats_core::round::{EmbedOverride, Positions, Round};
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::Tokenizer;

use crate::config::RunConfig;
use crate::exec::{ExecError, Executor};
use crate::planner::{PlanChange, PlanSet, Planner};
use crate::profile::CostModel;

/// A model ready to run.
pub struct Session {
    spec: Arc<ModelSpec>,
    tokenizer: Result<Tokenizer, String>,
    chat: Result<ChatTemplate, String>,
    executor: Executor,
    planner: Planner,
    run: RunConfig,
    /// Tokens in the KV cache.
    past: usize,
    /// The next text position (differs from `past` after an M-RoPE image).
    next_pos: i64,
    /// Tokens of the session so far (for repetition penalties).
    history: Vec<u32>,
    /// Decode rounds' times since the last reset.
    breakdown: DecodeBreakdown,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Session({:?}, past {})", self.spec.arch, self.past)
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
        let tokenizer = Tokenizer::from_gguf(&spec.gguf.metadata).map_err(|e| e.to_string());
        // kept with its reason: a template that does not compile is said
        // when a chat is asked for, not dropped
        let chat = ChatTemplate::from_gguf(&spec.gguf.metadata).map_err(|e| e.to_string());
        Ok(Session {
            spec,
            tokenizer,
            chat,
            executor,
            planner,
            run,
            past: 0,
            next_pos: 0,
            history: Vec::new(),
            breakdown: DecodeBreakdown::default(),
        })
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

    /// Tokens in the KV cache.
    pub fn past(&self) -> usize {
        self.past
    }

    /// The next position a text token takes.
    pub fn next_pos(&self) -> i64 {
        self.next_pos
    }

    /// Forgets the sequence (the KV cache is overwritten from the start).
    pub fn reset(&mut self) {
        self.past = 0;
        self.next_pos = 0;
        self.history.clear();
    }

    /// The current plan set.
    pub fn plan_set(&self) -> &PlanSet {
        self.planner.plans()
    }

    fn positions(&self, n: usize) -> Positions {
        let start = self.next_pos.max(0) as usize;
        if self.spec.arch.uses_mrope() {
            Positions::mrope_text(start, n)
        } else {
            Positions::linear(start, n)
        }
    }

    fn check_room(&self, n: usize) -> Result<(), SessionError> {
        if self.past + n > self.run.n_ctx {
            return Err(SessionError::Input(format!(
                "{} tokens do not fit the context: {} in use of {} (-c)",
                n, self.past, self.run.n_ctx
            )));
        }
        Ok(())
    }

    /// Runs a round whose rows, positions and overrides the caller built
    /// (the VLM path); the round's `past` is set here. Returns the outputs.
    pub fn run_round(
        &mut self,
        mut round: Round,
        advance_pos: i64,
    ) -> Result<Vec<f32>, SessionError> {
        self.check_room(round.n_rows)?;
        round.past = self.past;
        let (plan, _) = self.planner.choose(round.n_rows);
        let n = round.n_rows;
        let tokens = round.tokens.clone();
        let shape = round.shape();
        let out = self.executor.run_with(&Arc::new(round), plan)?;
        self.after_round(shape)?;
        self.past += n;
        self.next_pos += advance_pos;
        self.history.extend(tokens);
        Ok(out)
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

    /// Processes `tokens` in chunks (the tier choice) and returns the logits
    /// of the last one (`all`: of every one, `tokens.len() x vocab`).
    pub fn prefill(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>, SessionError> {
        self.prefill_with(tokens, all, None)
    }

    /// [`Session::prefill`] with rows of the embedding output replaced
    /// (image embeddings) and explicit positions (M-RoPE), both covering `tokens`.
    pub fn prefill_with(
        &mut self,
        tokens: &[u32],
        all: bool,
        embeds: Option<(&EmbedOverride, &Positions, i64)>,
    ) -> Result<Vec<f32>, SessionError> {
        self.check_prompt(tokens)?;
        let mut out = Vec::new();
        let mut start = 0;
        while start < tokens.len() {
            let (plan, chunk) = self.planner.choose(tokens.len() - start);
            let chunk = chunk.min(self.run.max_chunk.unwrap_or(usize::MAX)).max(1);
            let end = (start + chunk).min(tokens.len());
            let last = end == tokens.len();
            let (round, advance) = self.chunk_round(tokens, start..end, all, embeds);
            let shape = round.shape();
            let logits = self.executor.run_with(&Arc::new(round), plan)?;
            self.after_round(shape)?;
            self.past += end - start;
            self.next_pos += advance;
            self.history.extend_from_slice(&tokens[start..end]);
            if all {
                out.extend_from_slice(&logits);
            } else if last {
                out = logits;
            }
            start = end;
        }
        Ok(out)
    }

    fn check_prompt(&self, tokens: &[u32]) -> Result<(), SessionError> {
        if tokens.is_empty() {
            return Err(SessionError::Input("the prompt is empty".into()));
        }
        self.check_room(tokens.len())?;
        let vocab = self.spec.hp.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(SessionError::Input(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        Ok(())
    }

    /// The round of prompt chunk `range` and how far it advances the
    /// position: intermediate chunks keep one output row (they only fill
    /// the KV cache); image rows and M-RoPE positions come from `embeds`.
    fn chunk_round(
        &self,
        tokens: &[u32],
        range: std::ops::Range<usize>,
        all: bool,
        embeds: Option<(&EmbedOverride, &Positions, i64)>,
    ) -> (Round, i64) {
        let (start, end) = (range.start, range.end);
        let n = end - start;
        let last = end == tokens.len();
        let mut round = Round::text(tokens[range].to_vec(), self.past, all);
        if !all && !last {
            round.output_rows = vec![n - 1];
        }
        let Some((ov, pos, total_advance)) = embeds else {
            round.positions = self.positions(n);
            return (round, n as i64);
        };
        round.positions = Positions {
            components: pos.components,
            data: pos.data[start * pos.components..end * pos.components].to_vec(),
        };
        round.embed_override = override_rows(ov, start, end);
        (round, if last { total_advance } else { 0 })
    }

    /// Feeds one token and returns the next logits.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, SessionError> {
        self.prefill(&[token], false)
    }

    /// Logits for every position of `tokens` from an empty context.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SessionError> {
        self.reset();
        self.prefill(tokens, true)
    }

    /// The session's tokens so far.
    pub fn history(&self) -> &[u32] {
        &self.history
    }

    /// Time since `t` in milliseconds.
    pub(crate) fn ms_since(t: Instant) -> f64 {
        t.elapsed().as_secs_f64() * 1000.0
    }
}

/// The rows of `ov` that fall in `start..end`, renumbered from `start`.
fn override_rows(ov: &EmbedOverride, start: usize, end: usize) -> Option<EmbedOverride> {
    let rows: Vec<(usize, usize)> = ov
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| (start..end).contains(*r))
        .map(|(k, r)| (k, r - start))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let d = ov.data.len() / ov.rows.len().max(1);
    Some(EmbedOverride {
        rows: rows.iter().map(|x| x.1).collect(),
        data: rows
            .iter()
            .flat_map(|&(k, _)| ov.data[k * d..(k + 1) * d].iter().copied())
            .collect(),
    })
}
