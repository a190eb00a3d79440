//! The scheduler above the session: it admits requests as sequences (first
//! come, first served, up to `max_seqs` at once, each starting from the
//! longest prefix the KV pool still holds; a prompt whose prefix a running
//! request is computing right now waits until it is cached, so identical
//! system prompts and `n > 1` siblings are computed once), and runs rounds that give every
//! decoding sequence its next token and fill the rest of the round's token
//! budget with prompt chunks, so running answers are never starved by a
//! long prompt. Sampling, stop strings and limits are per request; events
//! say what each request got.
//!
//! When the KV pool cannot hold every running answer, the newest request is
//! preempted: its blocks go back and it waits at the front of the queue with
//! its answer so far. Once the pool can hold it again it computes its prompt
//! and that answer again (from what the pool still caches of them) and goes
//! on from the same sampler, grammar and stop-string state, so its events
//! read as if it had never stopped.

mod request;

pub use request::{Event, Request, RequestId};

use std::collections::VecDeque;

use ats_core::sampling::TokenLogprob;

use crate::session::decoder::{Decoder, Next, Step};
use crate::session::{
    Generation, Logits, SeqId, SeqInput, Session, SessionError, StopReason, Timings, prompt_part,
};

/// How the scheduler fills rounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences that run at once (more wait in order).
    pub max_seqs: usize,
    /// New tokens per round, decode tokens first (`None`: the most the
    /// session's plans hold, [`Session::max_round_tokens`]).
    pub round_tokens: Option<usize>,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_seqs: 1,
            round_tokens: None,
        }
    }
}

/// What the last round carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct RoundRecord {
    /// Sequences in the round.
    pub sequences: usize,
    /// Prompt tokens fed.
    pub prompt_tokens: usize,
    /// Decode tokens (one per decoding sequence).
    pub decode_tokens: usize,
    /// Seconds the round took.
    pub secs: f64,
}

impl RoundRecord {
    /// New tokens in the round.
    pub fn tokens(&self) -> usize {
        self.prompt_tokens + self.decode_tokens
    }
}

/// A request waiting for a sequence.
struct Waiting {
    id: RequestId,
    req: Request,
    /// When it was submitted, on the session's clock (`None` until the next
    /// [`Scheduler::step`] sees it: [`Scheduler::submit`] has no session to
    /// read the clock of).
    submitted: Option<f64>,
    /// What a preempted request had answered (`None`: not started).
    answer: Option<Answer>,
}

/// A request's answer so far: what it goes on from when it runs again.
struct Answer {
    decoder: Decoder,
    timings: Timings,
    /// Tokens of the answer that the request's prompt ends with (computed
    /// again after a preemption).
    in_prompt: usize,
}

impl Answer {
    /// Adds a round to the timings. A preempted request computes its
    /// answer so far again as prompt chunks: that time is its generation's
    /// (the prompt was processed once), and the chunk that samples its next
    /// token counts as that token's decode round, so a resumed answer still
    /// has one decode round a token after the first.
    fn count_round(&mut self, chunk: bool, sampled: bool, round_ms: f64) {
        let t = &mut self.timings;
        if chunk && self.in_prompt == 0 {
            t.prompt_ms += round_ms;
            return;
        }
        t.decode_ms += round_ms;
        if !chunk || sampled {
            t.decode_rounds += 1;
        }
    }
}

/// A request being answered.
struct Running {
    id: RequestId,
    seq: SeqId,
    /// The request; after a preemption its prompt ends with the answer so
    /// far (the tokens to compute again).
    req: Request,
    /// Prompt tokens in the cache.
    fed: usize,
    /// The token to feed next (once the prompt is in).
    next: Option<u32>,
    /// When it was submitted, on the session's clock ([`Session::now`]).
    submitted: f64,
    answer: Answer,
}

/// Admits requests and runs their rounds on a session.
pub struct Scheduler {
    cfg: SchedulerConfig,
    /// Requests not running, preempted ones first.
    waiting: VecDeque<Waiting>,
    running: Vec<Running>,
    next_id: RequestId,
    last_round: Option<RoundRecord>,
    preemptions: u64,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Scheduler({} running, {} waiting)",
            self.running.len(),
            self.waiting.len()
        )
    }
}

/// One sequence's part of the next round.
struct Work {
    /// Index in `running`.
    at: usize,
    /// Prompt tokens `fed..fed + n` (a chunk), or the next token when `None`.
    chunk: Option<usize>,
}

impl Scheduler {
    /// A scheduler filling rounds as `cfg` says.
    pub fn new(cfg: SchedulerConfig) -> Scheduler {
        Scheduler {
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 0,
            last_round: None,
            preemptions: 0,
        }
    }

    /// Requests preempted so far to free KV blocks (each resumed later).
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }

    /// What the last round that ran carried (`None` before the first).
    pub fn last_round(&self) -> Option<RoundRecord> {
        self.last_round
    }

    /// Queues a request; its events carry the returned id.
    pub fn submit(&mut self, req: Request) -> RequestId {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Waiting {
            id,
            req,
            submitted: None,
            answer: None,
        });
        id
    }

    /// Drops a request, queued or running (its sequence ends); false if it
    /// is not there.
    pub fn cancel(&mut self, id: RequestId, session: &mut Session) -> bool {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            self.waiting.remove(i);
            return true;
        }
        match self.running.iter().position(|r| r.id == id) {
            Some(i) => {
                let r = self.running.remove(i);
                session.remove_sequence(r.seq);
                true
            }
            None => false,
        }
    }

    /// Ends request `id` now, as a caller's stop: a running or preempted
    /// one finishes with [`StopReason::Cancelled`], its tokens and timings
    /// so far (its sequence ends); one not started is dropped. Returns its
    /// events.
    pub fn stop(&mut self, id: RequestId, session: &mut Session) -> Vec<Event> {
        if let Some(i) = self.waiting.iter().position(|w| w.id == id) {
            let w = self.waiting.remove(i).expect("found above");
            return match w.answer {
                Some(a) => finish(id, a, Ok(StopReason::Cancelled)),
                None => Vec::new(),
            };
        }
        match self.running.iter().position(|r| r.id == id) {
            Some(i) => {
                let r = self.running.remove(i);
                session.remove_sequence(r.seq);
                finish(r.id, r.answer, Ok(StopReason::Cancelled))
            }
            None => Vec::new(),
        }
    }

    /// Whether nothing is queued or running.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Requests running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Requests queued.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Admits what fits, runs one round, and returns what happened.
    pub fn step(&mut self, session: &mut Session) -> Vec<Event> {
        let mut events = Vec::new();
        let now = session.now();
        for w in self.waiting.iter_mut().filter(|w| w.submitted.is_none()) {
            w.submitted = Some(now);
        }
        self.admit(session, &mut events);
        if self.running.is_empty() {
            return events;
        }
        let budget = self
            .cfg
            .round_tokens
            .unwrap_or_else(|| session.max_round_tokens())
            .max(1);
        let mut work = self.plan_round(session, budget);
        if work.is_empty() {
            // every running prompt waits for blocks no one will free
            self.preempt_newest(
                session,
                "the KV pool is full: no block is free for any waiting prompt",
                &mut events,
            );
            return events;
        }
        loop {
            match self.run_round(session, &work) {
                Ok(out) => {
                    self.last_round = Some(RoundRecord {
                        sequences: work.len(),
                        prompt_tokens: work.iter().filter_map(|w| w.chunk).sum(),
                        decode_tokens: work.iter().filter(|w| w.chunk.is_none()).count(),
                        secs: session.executor().last_stats().total_secs,
                    });
                    self.after_round(session, &work, out, &mut events);
                    return events;
                }
                Err(SessionError::PoolFull(full)) => {
                    // the decodes alone are over the pool: the newest request gives way
                    self.preempt_newest(session, &full.to_string(), &mut events);
                    work = self.plan_round(session, budget);
                    if work.is_empty() {
                        return events;
                    }
                }
                Err(e) => {
                    self.fail(session, &work, &e, &mut events);
                    return events;
                }
            }
        }
    }

    /// Starts waiting requests while there is room, each as a sequence
    /// beginning with what the KV pool holds of its prompt.
    fn admit(&mut self, session: &mut Session, events: &mut Vec<Event>) {
        while self.running.len() < self.cfg.max_seqs.max(1) {
            if self
                .waiting
                .front()
                .is_some_and(|w| self.must_wait(session, w))
            {
                return;
            }
            let Some(Waiting {
                id,
                req,
                submitted,
                answer,
            }) = self.waiting.pop_front()
            else {
                return;
            };
            if req.prompt.is_empty() || req.prompt.len() > session.n_ctx() {
                events.push(Event::Failed {
                    id,
                    error: format!(
                        "the prompt has {} tokens; it must have 1 to {} (the context)",
                        req.prompt.len(),
                        session.n_ctx()
                    ),
                });
                continue;
            }
            let (seq, cached) =
                session.add_sequence_for_input(&req.prompt, req.embeds.as_ref().map(|e| &e.0));
            let answer = answer.unwrap_or_else(|| Answer {
                decoder: Decoder::new(&req.params),
                timings: Timings {
                    prompt_tokens: req.prompt.len(),
                    cached_tokens: cached,
                    ..Timings::default()
                },
                in_prompt: 0,
            });
            // in order of arrival, a resumed request among those admitted
            // after it: the newest is the one that gives way
            let at = self.running.partition_point(|r| r.id < id);
            self.running.insert(
                at,
                Running {
                    id,
                    seq,
                    fed: cached,
                    next: None,
                    req,
                    submitted: submitted.unwrap_or_else(|| session.now()),
                    answer,
                },
            );
        }
    }

    /// Whether the first waiting request must wait (and those behind it,
    /// first come first served): its prompt's prefix is being computed, or
    /// it was preempted and the pool cannot hold it yet beside the
    /// running ones (taken back at once, it would take blocks they need
    /// and be preempted again).
    fn must_wait(&self, session: &Session, w: &Waiting) -> bool {
        if w.answer.is_some() {
            let bt = session.run_config().kv_block_tokens.max(1);
            let need = (w.req.prompt.len() + 1).div_ceil(bt);
            return !self.running.is_empty() && session.free_blocks() < need;
        }
        self.prefix_in_flight(session, &w.req)
    }

    /// Whether a running request is computing blocks of `req`'s prompt
    /// that the pool does not hold yet: admitted now, `req` would compute
    /// them a second time. (Text prompts only: image rows are keyed by their
    /// embeddings, which token ids do not show.)
    fn prefix_in_flight(&self, session: &Session, req: &Request) -> bool {
        if req.embeds.is_some() {
            return false;
        }
        let bt = session.run_config().kv_block_tokens.max(1);
        // the last token always runs, as in the pool's lookup
        let usable = req.prompt.len().saturating_sub(1) / bt * bt;
        let cached = session.cached_prefix(&req.prompt, None);
        self.running.iter().any(|r| {
            let common = r
                .req
                .prompt
                .iter()
                .zip(&req.prompt)
                .take_while(|(a, b)| a == b)
                .count();
            let shared = (common / bt * bt).min(usable);
            r.req.embeds.is_none() && shared > cached && r.fed < shared
        })
    }

    /// Every decoding sequence's next token, then prompt chunks in order of
    /// arrival while the token budget and the KV pool's free blocks last
    /// (a prompt that finds no block waits for one).
    fn plan_round(&self, session: &Session, budget: usize) -> Vec<Work> {
        let mut work: Vec<Work> = (0..self.running.len())
            .filter(|&i| self.running[i].next.is_some())
            .map(|at| Work { at, chunk: None })
            .collect();
        let mut left = budget.saturating_sub(work.len());
        let mut blocks = session.free_blocks();
        for w in &work {
            blocks = blocks.saturating_sub(session.blocks_to_add(self.running[w.at].seq, 1));
        }
        for (at, r) in self.running.iter().enumerate() {
            let rest = r.req.prompt.len() - r.fed;
            if r.next.is_some() || rest == 0 || left == 0 {
                continue;
            }
            // the longest chunk whose blocks are free
            let n = rest.min(left).min(session.tokens_in_blocks(r.seq, blocks));
            if n == 0 {
                continue;
            }
            blocks -= session.blocks_to_add(r.seq, n);
            left -= n;
            work.push(Work { at, chunk: Some(n) });
        }
        work
    }

    /// Runs `work` as one round; returns each part's logits.
    fn run_round(
        &self,
        session: &mut Session,
        work: &[Work],
    ) -> Result<Vec<Vec<f32>>, SessionError> {
        let parts: Vec<_> = work
            .iter()
            .map(|w| {
                let r = &self.running[w.at];
                let n = w.chunk.unwrap_or(0);
                let last = r.fed + n == r.req.prompt.len();
                r.req
                    .embeds
                    .as_ref()
                    .filter(|_| w.chunk.is_some())
                    .map(|e| prompt_part((&e.0, &e.1, e.2), r.fed, r.fed + n, last))
            })
            .collect();
        let inputs: Vec<SeqInput<'_>> = work
            .iter()
            .zip(&parts)
            .map(|(w, part)| {
                let r = &self.running[w.at];
                match w.chunk {
                    Some(n) => SeqInput {
                        seq: r.seq,
                        tokens: &r.req.prompt[r.fed..r.fed + n],
                        embeds: part.as_ref().map(|p| p.view()),
                        logits: if r.fed + n == r.req.prompt.len() {
                            Logits::Last
                        } else {
                            Logits::None
                        },
                    },
                    None => SeqInput {
                        seq: r.seq,
                        tokens: std::slice::from_ref(r.next.as_ref().expect("decoding")),
                        embeds: None,
                        logits: Logits::Last,
                    },
                }
            })
            .collect();
        session.run_batch(&inputs)
    }

    /// Samples for every part that got logits, emits events, ends finished requests.
    fn after_round(
        &mut self,
        session: &mut Session,
        work: &[Work],
        out: Vec<Vec<f32>>,
        events: &mut Vec<Event>,
    ) {
        let round_ms = session.executor().last_stats().total_secs * 1e3;
        let tok = match session.shared_tokenizer() {
            Ok(t) => t,
            Err(e) => return self.fail(session, work, &e, events),
        };
        let mut done: Vec<(usize, Result<StopReason, String>)> = Vec::new();
        for (w, logits) in work.iter().zip(out) {
            let r = &mut self.running[w.at];
            if let Some(n) = w.chunk {
                r.fed += n;
            }
            r.answer
                .count_round(w.chunk.is_some(), !logits.is_empty(), round_ms);
            if logits.is_empty() {
                continue;
            }
            let (tokens, ctx) = (session.seq_tokens(r.seq).unwrap_or(0), session.n_ctx());
            let step = Step {
                logits: &logits,
                history: session.seq_history(r.seq).unwrap_or(&[]),
                room: tokens < ctx,
                position: tokens,
            };
            let id = r.id;
            let mut emit = |t: &str, lps: &[TokenLogprob]| {
                push_text(events, id, t, lps);
                true
            };
            let next = r.answer.decoder.step(step, &tok, &mut emit);
            if r.answer.timings.ttft_ms == 0.0 {
                r.answer.timings.ttft_ms = (session.now() - r.submitted) * 1e3;
            }
            match next {
                Ok(Next::Feed(t)) => r.next = Some(t),
                Ok(Next::Stop(reason)) => done.push((w.at, Ok(reason))),
                Err(e) => done.push((w.at, Err(e.to_string()))),
            }
        }
        // highest index first, so earlier indices stay valid
        done.sort_by_key(|d| std::cmp::Reverse(d.0));
        for (at, outcome) in done {
            let r = self.running.remove(at);
            session.remove_sequence(r.seq);
            events.extend(finish(r.id, r.answer, outcome));
        }
    }

    /// Gives the blocks of the running request that arrived last back: it
    /// waits at the front of the queue with its answer so far. A request
    /// running alone can never fit and fails with `why`.
    fn preempt_newest(&mut self, session: &mut Session, why: &str, events: &mut Vec<Event>) {
        let Some(r) = self.running.pop() else {
            return;
        };
        session.remove_sequence(r.seq);
        if self.running.is_empty() {
            events.push(Event::Failed {
                id: r.id,
                error: why.to_string(),
            });
            return;
        }
        self.preemptions += 1;
        let mut answer = r.answer;
        let tokens = answer.decoder.tokens();
        let req = r.req.continued(&tokens[answer.in_prompt..]);
        answer.in_prompt = tokens.len();
        self.waiting.push_front(Waiting {
            id: r.id,
            req,
            submitted: Some(r.submitted),
            answer: Some(answer),
        });
    }

    /// Fails every request in `work` with `e` (their sequences end).
    fn fail(
        &mut self,
        session: &mut Session,
        work: &[Work],
        e: &SessionError,
        events: &mut Vec<Event>,
    ) {
        let mut at: Vec<usize> = work.iter().map(|w| w.at).collect();
        at.sort_unstable_by(|a, b| b.cmp(a));
        for i in at {
            let r = self.running.remove(i);
            session.remove_sequence(r.seq);
            events.push(Event::Failed {
                id: r.id,
                error: e.to_string(),
            });
        }
    }
}

/// The events a finished request ends with: the rest of its text, then
/// the whole answer.
fn finish(id: RequestId, answer: Answer, outcome: Result<StopReason, String>) -> Vec<Event> {
    let stop = match outcome {
        Ok(s) => s,
        Err(error) => return vec![Event::Failed { id, error }],
    };
    let mut out = Vec::new();
    let Answer {
        decoder,
        mut timings,
        ..
    } = answer;
    let (tokens, text, held_back_bytes, logprobs) = decoder.finish(&stop, &mut |t, lps| {
        push_text(&mut out, id, t, lps);
        true
    });
    timings.gen_tokens = tokens.len();
    out.push(Event::Done {
        id,
        generation: Generation {
            tokens,
            text,
            stop,
            held_back_bytes,
            logprobs,
            timings,
        },
    });
    out
}

/// A request's final text as events: the log-probabilities of its tokens
/// (when asked for), then the text.
fn push_text(events: &mut Vec<Event>, id: RequestId, text: &str, lps: &[TokenLogprob]) {
    if !lps.is_empty() {
        events.push(Event::Logprobs {
            id,
            logprobs: lps.to_vec(),
        });
    }
    events.push(Event::Text {
        id,
        text: text.to_string(),
    });
}
