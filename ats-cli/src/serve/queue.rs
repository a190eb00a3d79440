//! One engine on one worker thread; requests wait in order in a bounded
//! queue. Each job starts from an empty context (`reset`), so requests never
//! see each other's tokens. A job's events go back on its own channel: when
//! the client goes away that channel closes, the next send fails and the
//! generation stops, freeing the engine for the next job.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use ats_core::sampling::TokenLogprob;
use ats_sched::session::{GenEvent, GenParams, Session, StopReason, Timings};
use serde::Serialize;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::errors::ApiError;

/// What a job asks for.
#[derive(Debug)]
pub struct Job {
    /// Request id, for logs.
    pub id: String,
    /// Prompt token ids (the rendered chat, or a completion prompt).
    pub prompt: Vec<u32>,
    /// Sampling and stopping.
    pub params: GenParams,
}

/// What a job reports, in order: text pieces, then one `Done` or `Failed`.
#[derive(Debug)]
pub enum JobEvent {
    /// Final text (never part of a pending stop string).
    Text(String),
    /// Log-probabilities of the tokens of the next `Text`.
    Logprobs(Vec<TokenLogprob>),
    /// The generation ended.
    Done(Finished),
    /// The engine failed.
    Failed(String),
}

/// A finished generation.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The whole answer.
    pub text: String,
    /// Why it stopped.
    pub stop: StopReason,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Bytes of an unfinished character a limit held back (not in `text`).
    pub held_back_bytes: usize,
    /// Log-probabilities of the answer's tokens (when asked for).
    pub logprobs: Vec<TokenLogprob>,
    /// Timings.
    pub timings: Timings,
}

/// Counters for `/health` and the tests.
#[derive(Debug, Default)]
pub struct Stats {
    queued: AtomicUsize,
    busy: AtomicBool,
    served: AtomicU64,
    cancelled: AtomicU64,
    failed: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Serialize)]
pub struct StatsSnapshot {
    /// Requests waiting.
    pub queued: usize,
    /// A generation is running.
    pub busy: bool,
    /// Queue capacity (waiting requests beyond the running one).
    pub capacity: usize,
    /// Generations finished (including cancelled ones).
    pub served: u64,
    /// Generations stopped because their client went away.
    pub cancelled: u64,
    /// Generations that failed.
    pub failed: u64,
}

/// The handle handlers submit jobs through.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<(Job, UnboundedSender<JobEvent>)>,
    stats: Arc<Stats>,
    capacity: usize,
}

impl Queue {
    /// Moves `engine` to a worker thread serving jobs in order, with room for
    /// `capacity` waiting jobs.
    pub fn start(engine: Session, capacity: usize) -> std::io::Result<Queue> {
        let (tx, rx) = sync_channel(capacity);
        let stats = Arc::new(Stats::default());
        let s = stats.clone();
        std::thread::Builder::new()
            .name("ats-engine".into())
            .spawn(move || worker(engine, rx, &s))?;
        Ok(Queue {
            tx,
            stats,
            capacity,
        })
    }

    /// Queues `job`; its events arrive on the returned receiver (drop it to
    /// cancel). A full queue is a 503.
    pub fn submit(&self, job: Job) -> Result<UnboundedReceiver<JobEvent>, ApiError> {
        let (etx, erx) = unbounded_channel();
        // count first so the worker never sees a job it has not been told of
        self.stats.queued.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send((job, etx)) {
            Ok(()) => Ok(erx),
            Err(e) => {
                self.stats.queued.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => ApiError::overloaded(format!(
                        "the server is busy: {} requests are already waiting (--queue); retry later",
                        self.capacity
                    )),
                    TrySendError::Disconnected(_) => {
                        ApiError::internal("the engine thread has stopped")
                    }
                })
            }
        }
    }

    /// The counters now.
    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.stats;
        StatsSnapshot {
            queued: s.queued.load(Ordering::SeqCst),
            busy: s.busy.load(Ordering::SeqCst),
            capacity: self.capacity,
            served: s.served.load(Ordering::SeqCst),
            cancelled: s.cancelled.load(Ordering::SeqCst),
            failed: s.failed.load(Ordering::SeqCst),
        }
    }
}

fn worker(mut engine: Session, rx: Receiver<(Job, UnboundedSender<JobEvent>)>, stats: &Stats) {
    while let Ok((job, events)) = rx.recv() {
        stats.busy.store(true, Ordering::SeqCst);
        stats.queued.fetch_sub(1, Ordering::SeqCst);
        if events.is_closed() {
            // the client left while the job waited
            stats.cancelled.fetch_add(1, Ordering::SeqCst);
            tracing::info!("{}: client gone before its turn", job.id);
        } else {
            run_job(&mut engine, &job, &events, stats);
        }
        stats.busy.store(false, Ordering::SeqCst);
    }
}

fn run_job(engine: &mut Session, job: &Job, events: &UnboundedSender<JobEvent>, stats: &Stats) {
    engine.reset();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        engine.generate(&job.prompt, &job.params, &mut |ev| match ev {
            // a closed channel means the client disconnected: stop
            GenEvent::Text(t) => events.send(JobEvent::Text(t.to_string())).is_ok(),
            GenEvent::Logprobs(lps) => events.send(JobEvent::Logprobs(lps.to_vec())).is_ok(),
        })
    }));
    let event = match result {
        Ok(Ok(g)) => {
            stats.served.fetch_add(1, Ordering::SeqCst);
            if g.stop == StopReason::Cancelled {
                stats.cancelled.fetch_add(1, Ordering::SeqCst);
            }
            let t = &g.timings;
            tracing::info!(
                "{}: {} prompt tokens ({:.1} t/s), {} generated ({:.1} t/s), stop {:?}",
                job.id,
                t.prompt_tokens,
                t.prompt_tps(),
                t.gen_tokens,
                t.gen_tps(),
                g.stop
            );
            JobEvent::Done(Finished {
                completion_tokens: g.tokens.len(),
                held_back_bytes: g.held_back_bytes,
                logprobs: g.logprobs,
                text: g.text,
                stop: g.stop,
                timings: g.timings,
            })
        }
        Ok(Err(e)) => {
            stats.failed.fetch_add(1, Ordering::SeqCst);
            tracing::error!("{}: {e}", job.id);
            JobEvent::Failed(e.to_string())
        }
        Err(_) => {
            stats.failed.fetch_add(1, Ordering::SeqCst);
            tracing::error!(
                "{}: the engine panicked; the next request starts afresh",
                job.id
            );
            JobEvent::Failed("internal error in the engine".into())
        }
    };
    let _ = events.send(event);
}
