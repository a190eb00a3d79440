//! The HTTP routes: OpenAI's chat and text completions (streamed as
//! server-sent events or not), the model list and a health check.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use tokio::sync::mpsc::UnboundedReceiver;

use super::errors::ApiError;
use super::params::Defaults;
use super::prompt::Prompter;
use super::queue::{Finished, Job, JobEvent, Queue};
use super::request::{check_chat, check_completion};
use super::wire::{
    AssistantMessage, ChatChoice, ChatChunk, ChatCompletion, ChunkChoice, Completion,
    CompletionChoice, Delta, ModelCard, ModelList, Sampling, TimingsOut, Usage,
};
use ats_sched::session::StopReason;

/// Everything the handlers share.
pub struct App {
    /// The engine's queue.
    pub queue: Queue,
    /// Tokenizer and template.
    pub prompter: Arc<Prompter>,
    /// Defaults and limits for generation settings.
    pub defaults: Defaults,
    /// The model's name.
    pub model: String,
    /// Unix seconds at start.
    pub created: u64,
    /// Largest request body, in bytes.
    pub max_body: usize,
    /// Request counter for ids.
    pub next_id: AtomicU64,
    /// Distinguishes ids of different server runs.
    pub id_salt: u32,
}

impl App {
    fn id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:08x}{n:08x}", self.id_salt)
    }
}

/// The router over `app`.
pub fn router(app: Arc<App>) -> Router {
    let limit = app.max_body;
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .with_state(app)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::status(StatusCode::NOT_FOUND, format!("no route {}", uri.path()))
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

async fn health(State(app): State<Arc<App>>) -> Response {
    let mut v = serde_json::to_value(app.queue.stats()).unwrap_or_default();
    v["status"] = "ok".into();
    Json(v).into_response()
}

async fn models(State(app): State<Arc<App>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: vec![ModelCard {
            id: app.model.clone(),
            object: "model",
            created: app.created,
            owned_by: "ats",
        }],
    })
}

async fn chat_completions(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(chat(app, body).await)
}

async fn completions(State(app): State<Arc<App>>, body: Result<Bytes, BytesRejection>) -> Response {
    respond(completion(app, body).await)
}

fn respond(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        tracing::info!("request refused ({}): {}", e.status.as_u16(), e.message);
        e.into_response()
    })
}

/// Tokenises a request's prompt off the async runtime (templates and
/// images take time) and queues the job: its id, prompt length and events.
async fn enqueue(
    app: &App,
    kind: &str,
    params: ats_sched::session::GenParams,
    prepare: impl FnOnce(&Prompter) -> Result<Vec<u32>, ApiError> + Send + 'static,
) -> Result<(String, usize, UnboundedReceiver<JobEvent>), ApiError> {
    let prompter = app.prompter.clone();
    let prompt = tokio::task::spawn_blocking(move || prepare(&prompter))
        .await
        .map_err(|e| ApiError::internal(format!("prompt preparation failed: {e}")))??;
    let id = app.id(kind);
    let prompt_tokens = prompt.len();
    let rx = app.queue.submit(Job {
        id: id.clone(),
        prompt,
        params,
    })?;
    Ok((id, prompt_tokens, rx))
}

async fn chat(app: Arc<App>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let body = body_bytes(&app, body)?;
    let (messages, params, sampling) = check_chat(&body, &app.defaults)?;
    let (id, prompt_tokens, rx) =
        enqueue(&app, "chatcmpl", params, move |p| p.chat(&messages)).await?;
    let created = unix_now();
    let model = app.model.clone();
    if !sampling.stream.unwrap_or(false) {
        let f = finish(rx).await?;
        return Ok(Json(ChatCompletion {
            id,
            object: "chat.completion",
            created,
            model,
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant",
                    content: f.text,
                },
                finish_reason: finish_reason(&f.stop),
                logprobs: None,
            }],
            usage: Usage::new(prompt_tokens, f.completion_tokens),
            timings: TimingsOut::from(&f.timings),
        })
        .into_response());
    }
    let include_usage = include_usage(&sampling);
    let chunk = move |delta: Delta, finish: Option<&'static str>, f: Option<&Finished>| {
        serde_json::to_value(ChatChunk {
            id: id.clone(),
            object: "chat.completion.chunk",
            created,
            model: model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                finish_reason: finish,
                logprobs: None,
            }],
            usage: None,
            timings: f.map(|f| TimingsOut::from(&f.timings)),
        })
        .unwrap_or_default()
    };
    let frames = move |stage: Stage<'_>| match stage {
        Stage::Start => vec![chunk(
            Delta {
                role: Some("assistant"),
                content: Some(String::new()),
            },
            None,
            None,
        )],
        Stage::Text(t) => vec![chunk(
            Delta {
                role: None,
                content: Some(t.to_string()),
            },
            None,
            None,
        )],
        Stage::End(f) => {
            let mut last = chunk(Delta::default(), Some(finish_reason(&f.stop)), Some(f));
            let mut out = Vec::new();
            if include_usage {
                out.push(last.clone());
                // the usage chunk has no choices, as in OpenAI's stream
                last["choices"] = serde_json::json!([]);
                last["usage"] = serde_json::json!(Usage::new(prompt_tokens, f.completion_tokens));
                last.as_object_mut().map(|o| o.remove("timings"));
            }
            out.push(last);
            out
        }
    };
    Ok(sse(rx, frames).into_response())
}

async fn completion(
    app: Arc<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(&app, body)?;
    let (raw, params, sampling) = check_completion(&body, &app.defaults)?;
    let (id, prompt_tokens, rx) =
        enqueue(&app, "cmpl", params, move |p| p.completion(&raw)).await?;
    let created = unix_now();
    let model = app.model.clone();
    let body = move |text: String,
                     finish: Option<&'static str>,
                     usage: Option<Usage>,
                     f: Option<&Finished>| Completion {
        id: id.clone(),
        object: "text_completion",
        created,
        model: model.clone(),
        choices: vec![CompletionChoice {
            text,
            index: 0,
            logprobs: None,
            finish_reason: finish,
        }],
        usage,
        timings: f.map(|f| TimingsOut::from(&f.timings)),
    };
    if !sampling.stream.unwrap_or(false) {
        let f = finish(rx).await?;
        let usage = Usage::new(prompt_tokens, f.completion_tokens);
        let reason = finish_reason(&f.stop);
        return Ok(Json(body(f.text.clone(), Some(reason), Some(usage), Some(&f))).into_response());
    }
    let include_usage = include_usage(&sampling);
    let frames = move |stage: Stage<'_>| {
        let v = match stage {
            Stage::Start => return Vec::new(),
            Stage::Text(t) => body(t.to_string(), None, None, None),
            Stage::End(f) => {
                let mut last = body(String::new(), Some(finish_reason(&f.stop)), None, Some(f));
                if !include_usage {
                    return vec![serde_json::to_value(last).unwrap_or_default()];
                }
                let first = serde_json::to_value(&last).unwrap_or_default();
                last.choices.clear();
                last.timings = None;
                last.usage = Some(Usage::new(prompt_tokens, f.completion_tokens));
                return vec![first, serde_json::to_value(last).unwrap_or_default()];
            }
        };
        vec![serde_json::to_value(v).unwrap_or_default()]
    };
    Ok(sse(rx, frames).into_response())
}

/// The body's bytes; a body over the limit is a 413 naming the flag.
fn body_bytes(app: &App, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rej| {
        if rej.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::status(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is larger than this server's limit of {} bytes (--max-body)",
                    app.max_body
                ),
            )
        } else {
            ApiError::status(rej.status(), rej.body_text())
        }
    })
}

fn include_usage(s: &Sampling) -> bool {
    s.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

/// OpenAI's `finish_reason`: `length` when a limit cut the answer short.
fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::Eog | StopReason::StopString(_) | StopReason::Cancelled => "stop",
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Waits for a job's end (non-streamed answers).
async fn finish(mut rx: UnboundedReceiver<JobEvent>) -> Result<Finished, ApiError> {
    while let Some(ev) = rx.recv().await {
        match ev {
            JobEvent::Text(_) => {}
            JobEvent::Done(f) => return Ok(f),
            JobEvent::Failed(m) => return Err(ApiError::internal(m)),
        }
    }
    Err(ApiError::internal("the engine thread has stopped"))
}

/// Where a stream is.
enum Stage<'a> {
    /// Before the first token.
    Start,
    /// New text.
    Text(&'a str),
    /// The end.
    End(&'a Finished),
}

/// A job's events as server-sent events: `frames` turns each stage into
/// JSON chunks; `[DONE]` ends a stream that finished, an error object one
/// that failed. Dropping the stream (the client went away) drops `rx`, which
/// cancels the generation.
fn sse<F>(
    rx: UnboundedReceiver<JobEvent>,
    frames: F,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: FnMut(Stage<'_>) -> Vec<serde_json::Value> + Send + 'static,
{
    struct St<F> {
        rx: UnboundedReceiver<JobEvent>,
        frames: F,
        pending: std::collections::VecDeque<Event>,
        started: bool,
        done: bool,
    }
    let data = |v: serde_json::Value| Event::default().data(v.to_string());
    let st = St {
        rx,
        frames,
        pending: Default::default(),
        started: false,
        done: false,
    };
    let stream = futures_util::stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            if !st.started {
                st.started = true;
                st.pending
                    .extend((st.frames)(Stage::Start).into_iter().map(data));
                continue;
            }
            match st.rx.recv().await {
                Some(JobEvent::Text(t)) => st
                    .pending
                    .extend((st.frames)(Stage::Text(&t)).into_iter().map(data)),
                Some(JobEvent::Done(f)) => {
                    st.pending
                        .extend((st.frames)(Stage::End(&f)).into_iter().map(data));
                    st.pending.push_back(Event::default().data("[DONE]"));
                    st.done = true;
                }
                Some(JobEvent::Failed(m)) => {
                    st.pending.push_back(data(ApiError::internal(m).json()));
                    st.done = true;
                }
                None => {
                    st.pending.push_back(data(
                        ApiError::internal("the engine thread has stopped").json(),
                    ));
                    st.done = true;
                }
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
