//! The HTTP routes: OpenAI's chat and text completions (streamed as
//! server-sent events or not), the model list and a health check. A body
//! must be JSON and arrive within the body timeout; it is then checked and
//! turned into a prompt on a blocking thread, [`PREPARING`] requests at a
//! time.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use tokio::sync::Semaphore;
use tokio::sync::mpsc::UnboundedReceiver;
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::choices::{Ended, check_n, finish_all, sse_choices, submit_choices, usage_of};
use super::errors::ApiError;
use super::logprobs;
use super::params::Defaults;
use super::prompt::{Prompt, Prompter};
use super::queue::{Finished, Job, JobEvent, Queue};
use super::request::check_completion;
use super::wire::{
    Completion, CompletionChoice, CompletionLogprobs, ModelCard, ModelList, Sampling, TimingsOut,
    Usage,
};
use ats_core::sampling::TokenLogprob;
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
    /// How long a body may take to arrive.
    pub body_timeout: Duration,
    /// Connections served at once (for the message past the limit).
    pub max_connections: usize,
    /// Permits to check a body and build its prompt ([`PREPARING`]).
    pub preparing: Arc<Semaphore>,
    /// Request counter for ids.
    pub next_id: AtomicU64,
    /// Distinguishes ids of different server runs.
    pub id_salt: u32,
    /// How embeddings pool hidden states.
    pub pooling: ats_sched::session::Pooling,
}

impl App {
    /// A new request id.
    pub fn id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:08x}{n:08x}", self.id_salt)
    }
}

/// Requests checked and tokenized at once. The engine runs one job at a
/// time, so more would only hold more bodies and prompts in memory.
pub const PREPARING: usize = 2;

/// The router over `app`, with `cors` when browsers may call it.
pub fn router(app: Arc<App>, cors: Option<CorsLayer>) -> Router {
    let r = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/embeddings", post(super::embeddings::embeddings))
        .route("/v1/responses", post(super::responses::responses))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/v1/ats/state", get(engine_state))
        .route("/metrics", get(super::metrics::metrics))
        .merge(super::web::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app);
    match cors {
        Some(c) => r.layer(c),
        None => r,
    }
}

/// What a connection past `--max-connections` gets: `/health` as usual,
/// a 503 for everything else.
pub fn full_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .fallback(too_many_connections)
        .with_state(app)
}

/// The CORS layer for `--allow-origin` values (`*` for any origin), or
/// None without any: browsers then refuse pages on other origins, since
/// every POST needs a JSON content type and so a preflight.
pub fn cors(origins: &[String]) -> Result<Option<CorsLayer>, String> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        let values = origins
            .iter()
            .map(|o| {
                let ok = (o.starts_with("http://") || o.starts_with("https://"))
                    && !o.ends_with('/');
                match HeaderValue::from_str(o) {
                    Ok(v) if ok => Ok(v),
                    _ => Err(format!(
                        "--allow-origin {o:?}: give an origin like https://example.com:8443 (scheme, host, optional port, no path) or *"
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([CONTENT_TYPE, AUTHORIZATION]),
    ))
}

async fn too_many_connections(State(app): State<Arc<App>>) -> ApiError {
    ApiError {
        code: Some("too_many_connections"),
        ..ApiError::status(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the server has {} connections open (--max-connections): retry later",
                app.max_connections
            ),
        )
    }
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
    if let Some(m) = crate::report::simulated() {
        // every timing this server reports is the machine model's virtual time
        v["simulated"] = m.into();
    }
    Json(v).into_response()
}

/// Where the model sits and what the engine did lately (the web page's view).
async fn engine_state(State(app): State<Arc<App>>) -> Response {
    let mut v = serde_json::to_value(app.queue.state()).unwrap_or_default();
    v["requests"] = serde_json::to_value(app.queue.stats()).unwrap_or_default();
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

async fn chat_completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    respond(super::chat::chat(app, headers, body).await)
}

async fn completions(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    respond(completion(app, headers, body).await)
}

/// The answer, or the error as OpenAI's JSON with its status (logged).
pub fn respond(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        tracing::info!("request refused ({}): {}", e.status.as_u16(), e.message);
        e.into_response()
    })
}

/// Checks a body and builds its prompt with `prepare`, on a blocking
/// thread (JSON, templates and tokenizing take CPU time), at most
/// [`PREPARING`] at a time.
pub async fn prepared<T: Send + 'static>(
    app: &App,
    body: Bytes,
    prepare: impl FnOnce(&[u8], &Defaults, &Prompter) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = app
        .preparing
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::internal("the server is stopping"))?;
    let prompter = app.prompter.clone();
    let defaults = app.defaults.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        prepare(&body, &defaults, &prompter)
    })
    .await
    .map_err(|e| ApiError::internal(format!("prompt preparation failed: {e}")))?
}

/// Queues a prepared job: its id, prompt length and events.
pub(super) fn submit(
    app: &App,
    kind: &str,
    prompt: Prompt,
    params: ats_sched::session::GenParams,
) -> Result<(String, usize, UnboundedReceiver<JobEvent>), ApiError> {
    let id = app.id(kind);
    let prompt_tokens = prompt.n_tokens();
    let rx = app.queue.submit(Job {
        id: id.clone(),
        prompt,
        params,
    })?;
    Ok((id, prompt_tokens, rx))
}

async fn completion(app: Arc<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body = read_body(&app, &headers, body).await?;
    let (prompt, params, sampling) = prepared(&app, body, |body, d, p| {
        let (raw, params, sampling) = check_completion(body, d)?;
        Ok((Prompt::Text(p.completion(raw)?), params, sampling))
    })
    .await?;
    let n = check_n(sampling.n)?;
    let want_logprobs = params.logprobs.is_some();
    let c = submit_choices(&app, "cmpl", prompt, params, n)?;
    let created = unix_now();
    let model = app.model.clone();
    let prompter = app.prompter.clone();
    // the logprobs of tokens whose text starts at byte `at` of the answer
    let lps = move |l: &[TokenLogprob], at: usize| -> Option<CompletionLogprobs> {
        want_logprobs.then(|| logprobs::completion(prompter.tokenizer(), l, at))
    };
    let id = c.id.clone();
    let body = move |choices: Vec<CompletionChoice>, usage: Option<Usage>, f: Option<&Finished>| {
        Completion {
            id: id.clone(),
            object: "text_completion",
            created,
            model: model.clone(),
            choices,
            usage,
            timings: f.map(TimingsOut::of),
        }
    };
    let choice = |index, text, finish, logprobs| CompletionChoice {
        text,
        index,
        logprobs,
        finish_reason: finish,
    };
    if !sampling.stream.unwrap_or(false) {
        let fs = finish_all(c.rxs).await?;
        let choices = fs
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let reason = Some(finish_reason(&f.stop));
                choice(i, f.text.clone(), reason, lps(&f.logprobs, 0))
            })
            .collect();
        let all: Vec<&Finished> = fs.iter().collect();
        let usage = usage_of(c.prompt_tokens, &all);
        return Ok(Json(body(choices, Some(usage), Some(&fs[0]))).into_response());
    }
    let include_usage = include_usage(&sampling);
    let ended: Ended = Arc::new(std::sync::Mutex::new(Vec::new()));
    let body = Arc::new(body);
    let lps = Arc::new(lps);
    let streams = c
        .rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let (body, lps, ended) = (body.clone(), lps.clone(), ended.clone());
            let mut sent = 0;
            let frames = move |stage: Stage<'_>| {
                let v = match stage {
                    Stage::Start => return Vec::new(),
                    Stage::Text(t, l) => {
                        let l = lps(l, sent);
                        sent += t.len();
                        body(vec![choice(i, t.to_string(), None, l)], None, None)
                    }
                    Stage::End(f) => {
                        if let Ok(mut e) = ended.lock() {
                            e.push((i, f.clone()));
                        }
                        let reason = Some(finish_reason(&f.stop));
                        body(vec![choice(i, String::new(), reason, None)], None, Some(f))
                    }
                };
                vec![serde_json::to_value(v).unwrap_or_default()]
            };
            (rx, frames)
        })
        .collect::<Vec<_>>();
    let prompt_tokens = c.prompt_tokens;
    let tail = move |done: &[(usize, Finished)]| {
        if !include_usage || done.is_empty() {
            return Vec::new();
        }
        let all: Vec<&Finished> = done.iter().map(|(_, f)| f).collect();
        let last = body(Vec::new(), Some(usage_of(prompt_tokens, &all)), None);
        vec![serde_json::to_value(last).unwrap_or_default()]
    };
    Ok(sse_choices(streams, ended, tail).into_response())
}

/// The body of a JSON request, read within `--body-timeout` and
/// `--max-body`: a 415 for another content type, a 413 for a body over the
/// limit (from its Content-Length before reading, when it has one), a 408
/// for one that does not arrive in time.
pub async fn read_body(app: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    require_json(headers)?;
    let too_large = || {
        ApiError::status(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than this server's limit of {} bytes (--max-body)",
                app.max_body
            ),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > app.max_body as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(app.body_timeout, axum::body::to_bytes(body, app.max_body)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if over_limit(&e) => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "cannot read the request body: {e}"
        ))),
        Err(_) => Err(ApiError::status(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s (--body-timeout)",
                app.body_timeout.as_secs_f64()
            ),
        )),
    }
}

/// Whether reading a body failed on its length limit.
fn over_limit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Request bodies are JSON. Requiring the content type also keeps web
/// pages from posting to the server: a cross-origin JSON POST needs a CORS
/// preflight, which only `--allow-origin` answers.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let mime = ct
        .as_deref()
        .and_then(|c| c.split(';').next())
        .map(str::trim);
    if mime.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    Err(ApiError {
        code: Some("unsupported_media_type"),
        ..ApiError::status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            match ct {
                Some(c) => {
                    format!("the body must be JSON (Content-Type: application/json), not {c:?}")
                }
                None => "the body must be JSON: send Content-Type: application/json".into(),
            },
        )
    })
}

pub(super) fn include_usage(s: &Sampling) -> bool {
    s.stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
}

/// OpenAI's `finish_reason`: `length` when a limit cut the answer short.
pub(super) fn finish_reason(stop: &StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::Eog | StopReason::StopString(_) | StopReason::Cancelled => "stop",
    }
}

pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Waits for a job's end (non-streamed answers).
pub(super) async fn finish(mut rx: UnboundedReceiver<JobEvent>) -> Result<Finished, ApiError> {
    while let Some(ev) = rx.recv().await {
        match ev {
            JobEvent::Text(_) | JobEvent::Logprobs(_) => {}
            JobEvent::Done(f) => return Ok(*f),
            JobEvent::Failed(m) => return Err(ApiError::internal(m)),
        }
    }
    Err(ApiError::internal("the engine thread has stopped"))
}

/// Where a stream is.
pub(super) enum Stage<'a> {
    /// Before the first token.
    Start,
    /// New text, and the log-probabilities of its tokens (when asked for).
    Text(&'a str, &'a [TokenLogprob]),
    /// The end.
    End(&'a Finished),
}

/// A job's events as server-sent events made by `frames` (named events, as
/// the Responses API sends), and `end` after the last one of a stream that
/// finished. Dropping the stream (the client went away) drops `rx`, which
/// cancels the generation.
pub(super) fn sse_events<F>(
    rx: UnboundedReceiver<JobEvent>,
    frames: F,
    end: Option<Event>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>>
where
    F: FnMut(Stage<'_>) -> Vec<Event> + Send + 'static,
{
    Sse::new(job_events(rx, frames, end)).keep_alive(KeepAlive::default())
}

/// A job's events made into server-sent events by `frames`, with `end`
/// after the last frame of a job that finished.
pub(super) fn job_events<F>(
    rx: UnboundedReceiver<JobEvent>,
    frames: F,
    end: Option<Event>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static
where
    F: FnMut(Stage<'_>) -> Vec<Event> + Send + 'static,
{
    struct St<F> {
        rx: UnboundedReceiver<JobEvent>,
        frames: F,
        end: Option<Event>,
        pending: std::collections::VecDeque<Event>,
        /// Log-probabilities of the next text.
        logprobs: Vec<TokenLogprob>,
        started: bool,
        done: bool,
    }
    let data = |v: serde_json::Value| Event::default().data(v.to_string());
    let st = St {
        rx,
        frames,
        end,
        pending: Default::default(),
        logprobs: Vec::new(),
        started: false,
        done: false,
    };
    futures_util::stream::unfold(st, move |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            if !st.started {
                st.started = true;
                st.pending.extend((st.frames)(Stage::Start));
                continue;
            }
            match st.rx.recv().await {
                Some(JobEvent::Logprobs(l)) => st.logprobs.extend(l),
                Some(JobEvent::Text(t)) => {
                    let l = std::mem::take(&mut st.logprobs);
                    st.pending.extend((st.frames)(Stage::Text(&t, &l)));
                }
                Some(JobEvent::Done(f)) => {
                    st.pending.extend((st.frames)(Stage::End(&f)));
                    st.pending.extend(st.end.take());
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
    })
}
