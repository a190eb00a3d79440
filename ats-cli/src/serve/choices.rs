//! `n > 1`: one request, several answers to the same prompt. Each choice is
//! a job of its own (the scheduler runs them side by side, and the siblings
//! of the first wait for its prompt to reach the KV pool, so the prompt is
//! computed once); choice `i` samples with the request's seed plus `i`.
//! Streamed choices interleave, each chunk naming its choice.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc::UnboundedReceiver;

use super::errors::ApiError;
use super::prompt::Prompt;
use super::queue::{Finished, JobEvent};
use super::routes::{App, Stage, finish, job_events, submit};
use super::wire::Usage;
use ats_sched::session::GenParams;

/// Most choices in one request.
pub const MAX_CHOICES: usize = 16;

/// The submitted jobs of a request: its id, its prompt's tokens and each
/// choice's events.
pub struct Choices {
    /// The request's id.
    pub id: String,
    /// Tokens of the prompt (counted once, however many choices).
    pub prompt_tokens: usize,
    /// Each choice's events, in choice order.
    pub rxs: Vec<UnboundedReceiver<JobEvent>>,
}

/// Submits `n` jobs of `prompt`, choice `i` seeded with the seed plus `i`.
/// A queue that fills part way refuses the request; the choices already
/// queued are dropped with their receivers.
pub fn submit_choices(
    app: &App,
    kind: &str,
    prompt: Prompt,
    params: GenParams,
    n: usize,
) -> Result<Choices, ApiError> {
    let id = app.id(kind);
    let prompt_tokens = prompt.n_tokens();
    let mut rxs = Vec::with_capacity(n);
    let mut prompt = Some(prompt);
    for i in 0..n {
        let mut p = params.clone();
        p.sampler.seed = params.sampler.seed.wrapping_add(i as u64);
        // the last choice takes the prompt, the others a copy
        let this = if i + 1 == n {
            prompt.take().expect("taken once")
        } else {
            prompt.as_ref().expect("kept until the last").clone()
        };
        let (_, _, rx) = submit(app, kind, this, p)?;
        rxs.push(rx);
    }
    Ok(Choices {
        id,
        prompt_tokens,
        rxs,
    })
}

/// Waits for every choice's end.
pub async fn finish_all(rxs: Vec<UnboundedReceiver<JobEvent>>) -> Result<Vec<Finished>, ApiError> {
    let all = futures_util::future::join_all(rxs.into_iter().map(finish)).await;
    all.into_iter().collect()
}

/// The usage of a request's answers: the prompt once, the answers' tokens
/// summed, the cached prompt tokens those of the first choice (the others
/// find the prompt it computed).
pub fn usage_of(prompt_tokens: usize, fs: &[&Finished]) -> Usage {
    let cached = fs.first().map_or(0, |f| f.timings.cached_tokens);
    let completion = fs.iter().map(|f| f.completion_tokens).sum();
    Usage::new(prompt_tokens, cached, completion)
}

/// What each streamed choice leaves when it ends, for the closing usage chunk.
pub type Ended = Arc<Mutex<Vec<(usize, Finished)>>>;

/// The choices' streams interleaved as they come, then `tail` (given what
/// every choice left in `ended`), then `[DONE]`.
pub fn sse_choices<F>(
    streams: Vec<(UnboundedReceiver<JobEvent>, F)>,
    ended: Ended,
    tail: impl FnOnce(&[(usize, Finished)]) -> Vec<serde_json::Value> + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: FnMut(Stage<'_>) -> Vec<serde_json::Value> + Send + 'static,
{
    type Boxed = Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;
    let data = |v: serde_json::Value| Event::default().data(v.to_string());
    let each: Vec<Boxed> = streams
        .into_iter()
        .map(|(rx, mut frames)| {
            let events = move |s: Stage<'_>| frames(s).into_iter().map(data).collect();
            Box::pin(job_events(rx, events, None)) as Boxed
        })
        .collect();
    let end = futures_util::stream::once(async move {
        let mut done = ended.lock().map(|v| v.clone()).unwrap_or_default();
        done.sort_by_key(|(i, _)| *i);
        let mut out: Vec<Event> = tail(&done).into_iter().map(data).collect();
        out.push(Event::default().data("[DONE]"));
        futures_util::stream::iter(out.into_iter().map(Ok))
    })
    .flatten();
    Sse::new(futures_util::stream::select_all(each).chain(end)).keep_alive(KeepAlive::default())
}

/// The request's `n`, checked.
pub fn check_n(n: Option<u64>) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n @ 1..) if n as usize <= MAX_CHOICES => Ok(n as usize),
        Some(n) => Err(ApiError::bad_param(
            "n",
            format!("n must be 1 to {MAX_CHOICES}, not {n}"),
        )),
    }
}
