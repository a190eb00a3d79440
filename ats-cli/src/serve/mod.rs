//! `ats-cli serve`: the model behind OpenAI's HTTP API, so existing clients
//! work unchanged. One session on a worker thread runs up to `--parallel`
//! requests at once (continuous batching), the rest waiting in order in a
//! bounded queue (`queue.rs`); connections are
//! accepted within time and count limits (`listen.rs`); axum handlers
//! (`routes.rs`) read bodies within a deadline, check requests
//! (`request.rs`), build prompts (`prompt.rs`, `params.rs`) a few at a time
//! and stream the answers back (`wire.rs`, `errors.rs`); `check.rs` runs
//! the checks and the prompt builder on a body alone, for the fuzz target.

mod chat;
pub mod check;
mod choices;
mod embeddings;
mod errors;
#[cfg(test)]
mod fuzz;
mod listen;
mod logprobs;
mod memory;
mod metrics;
mod params;
mod prompt;
mod queue;
mod request;
mod responses;
mod routes;
mod state;
mod tools;
mod web;
mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{Context, Result};
use ats_core::chat::ChatTemplate;
use clap::Args;
use tracing::{info, warn};

use crate::args::{ModelArgs, SampleArgs, TemplateArgs, parse_vram};
use crate::load;
use crate::usage::usage_bail;

const EXAMPLES: &str = "Examples:
  ats-cli serve -m SmolLM2-135M-Instruct.Q4_1.gguf --port 8080
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"stream\": true}'

Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings,
POST /v1/responses (stateless),
GET /v1/models, GET /health, GET /v1/ats/state (where the model sits, memory,
recent rounds), GET /metrics (Prometheus), and GET / (a web page: a chat, and
pictures of the engine state).
Request bodies must be JSON (Content-Type: application/json); web pages on other
origins may call the server only when --allow-origin names them.
Sampling flags set the defaults for requests that leave a field unset; without
--seed, a request without a seed gets a random one.";

/// Serve the model over HTTP with OpenAI's API.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    #[command(flatten)]
    template: TemplateArgs,
    /// Address to listen on (loopback by default: other machines cannot connect).
    #[arg(long = "host", default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port; the log says which).
    #[arg(long = "port", default_value_t = 8080)]
    port: u16,
    /// The model's name in /v1/models and answers (default: the file name
    /// without .gguf).
    #[arg(long = "alias", value_name = "NAME")]
    alias: Option<String>,
    /// Requests answered at once, each a sequence of the same session
    /// (llama.cpp's -np): their decode tokens and prompt chunks share
    /// rounds, and the context (-c) is shared among them.
    #[arg(long = "parallel", short = 'P', value_name = "N", default_value_t = 4)]
    parallel: usize,
    /// Requests that may wait while --parallel run; more get 503 with Retry-After.
    #[arg(long = "queue", value_name = "N", default_value_t = 16)]
    queue: usize,
    /// Largest request body.
    #[arg(long = "max-body", value_name = "SIZE", default_value = "16MiB", value_parser = parse_vram)]
    max_body: u64,
    /// Connections served at once; past it, a few more get /health and a
    /// 503, the rest are closed. Request bodies in memory are at most this
    /// times --max-body.
    #[arg(long = "max-connections", value_name = "N", default_value_t = 32)]
    max_connections: usize,
    /// Seconds a connection has to send a request's headers, counted from
    /// when it is ready for one: idle keep-alive connections close after it too.
    #[arg(long = "header-timeout", value_name = "SECS", default_value_t = 10.0, value_parser = parse_secs)]
    header_timeout: f64,
    /// Seconds a request's body may take to arrive (408 after).
    #[arg(long = "body-timeout", value_name = "SECS", default_value_t = 60.0, value_parser = parse_secs)]
    body_timeout: f64,
    /// Let web pages from this origin (https://example.com, or * for any)
    /// call the server from a browser (CORS); repeat for several.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Longest prompt in tokens (default: the context size minus one).
    #[arg(long = "max-prompt-tokens", value_name = "N")]
    max_prompt_tokens: Option<usize>,
    /// Largest max_tokens a request may ask for, and the default for chat
    /// requests (default: the context size).
    #[arg(long = "max-tokens", value_name = "N")]
    max_tokens: Option<usize>,
    /// The model's vision projector (mmproj GGUF): chat messages may then
    /// carry images (image_url parts with base64 data URLs).
    #[arg(long = "mmproj", value_name = "FILE")]
    mmproj: Option<std::path::PathBuf>,
    /// Fewest pixels an image is resized to (default: the projector's).
    #[arg(long = "min-pixels", value_name = "N")]
    min_pixels: Option<u64>,
    /// Most pixels an image is resized to (default: the projector's, at
    /// most what a prompt can hold); `detail: "low"` images get at most 448x448.
    #[arg(long = "max-pixels", value_name = "N")]
    max_pixels: Option<u64>,
    /// Memory for image embeddings kept by their bytes, so an image sent
    /// again (each turn of a conversation) is not encoded again.
    #[arg(long = "image-cache", value_name = "SIZE", default_value = "256MiB", value_parser = parse_vram)]
    image_cache: u64,
    /// How /v1/embeddings pools a prompt's final hidden states: mean, last
    /// (decoder embedding models such as Qwen3-Embedding) or cls.
    #[arg(long = "pooling", value_name = "mean|last|cls", default_value = "mean", value_parser = ats_sched::session::Pooling::parse)]
    pooling: ats_sched::session::Pooling,
    /// A Jinja chat template to use instead of the model's (llama-server's
    /// flag): a template that renders `tools` gives the model its own
    /// tool-call format.
    #[arg(long = "chat-template-file", value_name = "FILE")]
    chat_template_file: Option<std::path::PathBuf>,
}

fn parse_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 86_400.0 => Ok(x),
        _ => Err(format!(
            "{s:?}: give seconds above 0, at most a day (86400)"
        )),
    }
}

/// Loads the model and serves until Ctrl-C or SIGTERM.
pub fn run(a: ServeArgs) -> Result<()> {
    if a.max_prompt_tokens == Some(0) {
        usage_bail!("--max-prompt-tokens must be at least 1");
    }
    if a.max_tokens == Some(0) {
        usage_bail!("--max-tokens must be at least 1");
    }
    if a.max_connections == 0 {
        usage_bail!("--max-connections must be at least 1");
    }
    listen::ensure_fd_limit(a.max_connections).map_err(crate::usage::UsageError)?;
    if !memory::return_large_frees() {
        tracing::debug!(
            "the allocator's mmap threshold is its own: freed request memory may stay resident"
        );
    }
    let cors = routes::cors(&a.allow_origin).map_err(crate::usage::UsageError)?;
    let addr: SocketAddr = format!("{}:{}", a.host, a.port)
        .parse()
        .or_else(|_| {
            // a host name such as `localhost`
            std::net::ToSocketAddrs::to_socket_addrs(&(a.host.as_str(), a.port))
                .ok()
                .and_then(|mut it| it.next())
                .ok_or(())
        })
        .map_err(|_| crate::usage::UsageError(format!("--host {:?} is not an address", a.host)))?;
    if a.parallel == 0 {
        usage_bail!("--parallel must be at least 1");
    }
    let mut model_args = a.model.clone();
    model_args.parallel = a.parallel;
    let loaded = load::load(&model_args, false)?;
    let engine = loaded.session;
    let n_ctx = engine.n_ctx();
    check_limits(&a, n_ctx)?;
    let tokenizer = engine.tokenizer()?.clone();
    let max_prompt = a
        .max_prompt_tokens
        .unwrap_or(n_ctx.saturating_sub(1).max(1));
    let vision = match &a.mmproj {
        Some(p) => Some(Arc::new(
            crate::vision::VisionFront::open(
                engine.spec().clone(),
                p,
                a.min_pixels,
                a.max_pixels,
                max_prompt,
                usize::try_from(a.image_cache).unwrap_or(usize::MAX),
            )
            .with_context(|| format!("cannot use the projector {}", p.display()))?,
        )),
        None if a.min_pixels.is_some() || a.max_pixels.is_some() => {
            usage_bail!("--min-pixels and --max-pixels need --mmproj FILE (a vision projector)")
        }
        None => None,
    };
    let template = match &a.chat_template_file {
        Some(path) => Ok(template_file(path, &tokenizer)?),
        None => ChatTemplate::from_gguf(&engine.spec().gguf.metadata).map_err(|e| e.to_string()),
    };
    match &template {
        Ok(t) if t.is_fallback() => warn!("the model has no chat template: using ChatML"),
        Ok(_) => {}
        Err(e) => {
            warn!("the model's chat template is unusable ({e}): /v1/chat/completions will fail")
        }
    }
    let max_tokens = a.max_tokens.unwrap_or(n_ctx);
    let model = a.alias.clone().unwrap_or_else(|| {
        a.model
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into())
    });
    let vocab = tokenizer.vocab_size();
    let app = Arc::new(routes::App {
        queue: queue::Queue::start(engine, vision.clone(), a.parallel, a.queue)
            .context("cannot start the engine thread")?,
        prompter: Arc::new(prompt::Prompter::new(
            tokenizer, template, max_prompt, vision,
        )),
        defaults: params::Defaults {
            sampler: a.sample.config(),
            seed: a.sample.seed,
            max_tokens,
            vocab,
            template_kwargs: a.template.kwargs(),
        },
        model: model.clone(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        max_body: usize::try_from(a.max_body).unwrap_or(usize::MAX),
        body_timeout: Duration::from_secs_f64(a.body_timeout),
        max_connections: a.max_connections,
        preparing: Arc::new(tokio::sync::Semaphore::new(routes::PREPARING)),
        next_id: AtomicU64::new(0),
        id_salt: rand::random(),
        pooling: a.pooling,
    });
    let limits = listen::ConnLimits {
        header_timeout: Duration::from_secs_f64(a.header_timeout),
        max_connections: a.max_connections,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("ats-http")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        if !local.ip().is_loopback() {
            warn!("listening on {local}: other machines can reach this server (it has no authentication)");
        }
        info!(
            "model {model:?}: context {n_ctx}, prompts up to {max_prompt} tokens, max_tokens up to {max_tokens}, {} at once, queue {}, body up to {} bytes, {} connections, header timeout {} s, body timeout {} s",
            a.parallel, a.queue, a.max_body, a.max_connections, a.header_timeout, a.body_timeout
        );
        info!("listening on http://{local}");
        let full = routes::full_router(app.clone());
        let router = routes::router(app, cors);
        listen::serve(listener, router, full, limits, shutdown(), DRAIN).await;
        anyhow::Ok(())
    })?;
    info!("stopped");
    Ok(())
}

/// The chat template in `path`, with the vocabulary's BOS and EOS texts.
fn template_file(path: &std::path::Path, tok: &ats_core::Tokenizer) -> Result<ChatTemplate> {
    let src = std::fs::read_to_string(path).map_err(|e| {
        crate::usage::UsageError(format!("--chat-template-file {}: {e}", path.display()))
    })?;
    let text = |id: Option<u32>| id.and_then(|i| tok.token_text(i)).unwrap_or("").to_string();
    let t = ChatTemplate::new(src, text(tok.bos_id()), text(tok.eos_id())).map_err(|e| {
        crate::usage::UsageError(format!("--chat-template-file {}: {e}", path.display()))
    })?;
    info!("chat template from {}", path.display());
    Ok(t)
}

/// How long a shutdown waits for open connections to finish.
const DRAIN: Duration = Duration::from_secs(5);

/// Limits the context cannot honour are usage errors at start, not 500s
/// per request later.
fn check_limits(a: &ServeArgs, n_ctx: usize) -> Result<()> {
    let most = n_ctx.saturating_sub(1).max(1);
    if let Some(n) = a.max_prompt_tokens
        && n > most
    {
        usage_bail!(
            "--max-prompt-tokens {n} leaves no room for an answer in the context of {n_ctx} tokens (-c): give at most {most}"
        );
    }
    if let Some(n) = a.max_tokens
        && n > n_ctx
    {
        usage_bail!("--max-tokens {n} is more than the context of {n_ctx} tokens (-c)");
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    info!("shutting down");
}
