//! The engine: a loaded model on a set of devices under a plan, with the
//! session state (KV cache, position) and the generation loop.

mod breakdown;
mod config;
mod error;
mod generate;
mod timings;

pub use breakdown::{BreakdownReport, DecodeBreakdown, DeviceShare, OpShare};
pub use config::{EngineConfig, Policy};
pub use error::EngineError;
pub use generate::{GenEvent, GenParams, Generation, StopReason};
pub use timings::Timings;

use std::sync::Arc;
use std::time::Instant;

use ats_core::chat::ChatTemplate;
use ats_core::device::{Device, HostMemory};
use ats_core::graph::Graph;
use ats_core::round::{EmbedOverride, Positions, Round};
use ats_core::spec::ModelSpec;
use ats_core::tokenizer::Tokenizer;

use crate::exec::{ExecConfig, Executor};
use crate::planner::{PlanSet, Planner};

/// A model ready to run.
pub struct Engine {
    spec: Arc<ModelSpec>,
    graph: Arc<Graph>,
    tokenizer: Option<Tokenizer>,
    tokenizer_error: Option<String>,
    chat: Result<ChatTemplate, String>,
    executor: Executor,
    planner: Planner,
    cfg: EngineConfig,
    n_ctx: usize,
    /// Tokens in the KV cache.
    past: usize,
    /// The next text position (differs from `past` after an M-RoPE image).
    next_pos: i64,
    /// Tokens of the session so far (for repetition penalties).
    history: Vec<u32>,
    /// Decode rounds' times since the last reset.
    breakdown: DecodeBreakdown,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Engine({:?}, past {})", self.spec.arch, self.past)
    }
}

impl Engine {
    /// Loads `spec` onto `devices` (device 0 is the host CPU) with a planner.
    pub fn new(
        spec: Arc<ModelSpec>,
        devices: Vec<Arc<dyn Device>>,
        planner: Planner,
        cfg: EngineConfig,
    ) -> Result<Engine, EngineError> {
        let graph = Arc::new(spec.graph()?);
        let n_ctx = cfg.n_ctx.unwrap_or(spec.hp.n_ctx_train.min(4096));
        if !(1..=ats_core::round::MAX_CONTEXT).contains(&n_ctx) {
            return Err(EngineError::Input(format!(
                "a context of {n_ctx} tokens is out of range: it must be 1 to {}",
                ats_core::round::MAX_CONTEXT
            )));
        }
        let (tokenizer, tokenizer_error) = match Tokenizer::from_gguf(&spec.gguf.metadata) {
            Ok(t) => (Some(t), None),
            Err(e) => (None, Some(e.to_string())),
        };
        // kept with its reason: a template that does not compile is said
        // when a chat is asked for, not dropped
        let chat = ChatTemplate::from_gguf(&spec.gguf.metadata).map_err(|e| e.to_string());
        let set = planner.plans();
        let host: Arc<dyn HostMemory> = spec.gguf.backing().clone();
        for d in &devices[1..] {
            // page-lock the mapping where the device can use it for faster copies
            d.pin_host(&host).map_err(crate::exec::ExecError::from)?;
        }
        let ecfg = ExecConfig {
            kv_capacity: n_ctx,
            kv_type: cfg.kv_type,
            slots_per_role: cfg.slots_per_role,
            region: None,
        };
        let mut executor = Executor::new(graph.clone(), host, devices, ecfg, set.plans[0].clone())?;
        executor.set_plans(set.plans.clone())?;
        Ok(Engine {
            spec,
            graph,
            tokenizer,
            tokenizer_error,
            chat,
            executor,
            planner,
            cfg,
            n_ctx,
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
        &self.graph
    }

    /// The tokenizer, or why the file has none usable.
    pub fn tokenizer(&self) -> Result<&Tokenizer, EngineError> {
        self.tokenizer.as_ref().ok_or_else(|| {
            EngineError::Input(format!(
                "the model has no usable tokenizer ({}); give token ids instead",
                self.tokenizer_error.as_deref().unwrap_or("unknown reason")
            ))
        })
    }

    /// The chat template (ChatML where the file has none, see
    /// [`ChatTemplate::is_fallback`]), or why the file's cannot be used.
    pub fn chat_template(&self) -> Result<&ChatTemplate, EngineError> {
        self.chat.as_ref().map_err(|e| {
            EngineError::Input(format!("the model's chat template cannot be used: {e}"))
        })
    }

    /// The executor (devices, ledgers, statistics).
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// Where the decode rounds since [`Engine::reset_decode_breakdown`] spent
    /// their time.
    pub fn decode_breakdown(&self) -> &DecodeBreakdown {
        &self.breakdown
    }

    /// Starts a new [`Engine::decode_breakdown`].
    pub fn reset_decode_breakdown(&mut self) {
        self.breakdown = DecodeBreakdown::default();
    }

    /// The planner and its current plans.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// Settings.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Context length.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Tokens in the KV cache.
    pub fn past(&self) -> usize {
        self.past
    }

    /// The next position a text token takes.
    pub fn next_pos(&self) -> i64 {
        self.next_pos
    }

    /// Forgets the session (the KV cache is overwritten from the start).
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

    fn check_room(&self, n: usize) -> Result<(), EngineError> {
        if self.past + n > self.n_ctx {
            return Err(EngineError::Input(format!(
                "{} tokens do not fit the context: {} in use of {} (-c)",
                n, self.past, self.n_ctx
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
    ) -> Result<Vec<f32>, EngineError> {
        self.check_room(round.n_rows)?;
        round.past = self.past;
        let (plan, _) = self.planner.choose(round.n_rows);
        let n = round.n_rows;
        let tokens = round.tokens.clone();
        let shape = round.shape();
        let out = self.executor.run_with(&Arc::new(round), plan)?;
        self.after_round(shape);
        self.past += n;
        self.next_pos += advance_pos;
        self.history.extend(tokens);
        Ok(out)
    }

    fn after_round(&mut self, shape: ats_core::graph::cost::RoundShape) {
        let stats = self.executor.last_stats().clone();
        if shape.n_tokens == 1 {
            self.breakdown.add(&self.graph, &stats);
        }
        self.planner.observe(&stats, shape);
        if let Some(new_set) = self.planner.maybe_replan() {
            // the executor moves what changed home (weights, KV caches) within the budget
            if self.executor.set_plans(new_set.plans.clone()).is_err() {
                self.planner.revert();
            }
        }
    }

    /// Re-plans now with the live costs (as the load-aware re-scheduler would)
    /// and switches the executor to the new plans; the KV cache is kept.
    /// Returns whether a re-plan happened (none without a GPU).
    pub fn force_replan(&mut self) -> Result<bool, EngineError> {
        let Some(set) = self.planner.replan_now() else {
            return Ok(false);
        };
        let plans = set.plans.clone();
        if let Err(e) = self.executor.set_plans(plans) {
            self.planner.revert();
            return Err(e.into());
        }
        Ok(true)
    }

    /// Runs with the given plans (same layout) until the next re-plan: for
    /// experiments that measure plans the planner did not choose.
    pub fn set_plans_for_experiment(
        &mut self,
        set: crate::planner::PlanSet,
    ) -> Result<(), EngineError> {
        self.executor.set_plans(set.plans.clone())?;
        self.planner.install(set);
        Ok(())
    }

    /// Processes `tokens` in chunks (the tier choice) and returns the logits
    /// of the last one (`all`: of every one, `tokens.len() x vocab`).
    pub fn prefill(&mut self, tokens: &[u32], all: bool) -> Result<Vec<f32>, EngineError> {
        self.prefill_with(tokens, all, None)
    }

    /// [`Engine::prefill`] with rows of the embedding output replaced
    /// (image embeddings) and explicit positions (M-RoPE), both covering `tokens`.
    pub fn prefill_with(
        &mut self,
        tokens: &[u32],
        all: bool,
        embeds: Option<(&EmbedOverride, &Positions, i64)>,
    ) -> Result<Vec<f32>, EngineError> {
        if tokens.is_empty() {
            return Err(EngineError::Input("the prompt is empty".into()));
        }
        self.check_room(tokens.len())?;
        let vocab = self.spec.hp.n_vocab;
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::Input(format!(
                "token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        let mut out = Vec::new();
        let mut start = 0;
        while start < tokens.len() {
            let (plan, chunk) = self.planner.choose(tokens.len() - start);
            let chunk = chunk.min(self.cfg.max_chunk.unwrap_or(usize::MAX)).max(1);
            let end = (start + chunk).min(tokens.len());
            let n = end - start;
            let last = end == tokens.len();
            let mut round = Round::text(tokens[start..end].to_vec(), self.past, all);
            if !all && !last {
                // intermediate chunks only fill the KV cache; keep one output row
                round.output_rows = vec![n - 1];
            }
            let advance = match embeds {
                Some((ov, pos, total_advance)) => {
                    round.positions = Positions {
                        components: pos.components,
                        data: pos.data[start * pos.components..end * pos.components].to_vec(),
                    };
                    let rows: Vec<(usize, usize)> = ov
                        .rows
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| (start..end).contains(*r))
                        .map(|(k, r)| (k, r - start))
                        .collect();
                    if !rows.is_empty() {
                        let d = ov.data.len() / ov.rows.len().max(1);
                        round.embed_override = Some(EmbedOverride {
                            rows: rows.iter().map(|x| x.1).collect(),
                            data: rows
                                .iter()
                                .flat_map(|&(k, _)| ov.data[k * d..(k + 1) * d].iter().copied())
                                .collect(),
                        });
                    }
                    if last { total_advance } else { 0 }
                }
                None => {
                    round.positions = self.positions(n);
                    n as i64
                }
            };
            let shape = round.shape();
            let logits = self.executor.run_with(&Arc::new(round), plan)?;
            self.after_round(shape);
            self.past += n;
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

    /// Feeds one token and returns the next logits.
    pub fn decode(&mut self, token: u32) -> Result<Vec<f32>, EngineError> {
        self.prefill(&[token], false)
    }

    /// Logits for every position of `tokens` from an empty context.
    pub fn eval(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
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
