//! Request bodies to checked requests: JSON parsed once, read as the
//! endpoint's fields and the shared sampling fields, features this server
//! does not offer refused, generation settings derived. Pure functions of
//! the body's bytes, so the fuzz test (`fuzz.rs`) can drive them directly.

use ats_sched::session::GenParams;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::errors::ApiError;
use super::params::{Defaults, gen_params};
use super::wire::{ChatRequest, CompletionRequest, Message, Sampling};

/// A checked `/v1/chat/completions` body: the messages (rendered later, on a
/// blocking thread), the generation settings and the sampling fields.
pub fn check_chat(
    body: &[u8],
    d: &Defaults,
) -> Result<(Vec<Message>, GenParams, Sampling), ApiError> {
    let (req, sampling): (ChatRequest, Sampling) = parse(body)?;
    log_request("chat", &sampling);
    if req.logprobs == Some(true) || req.top_logprobs.is_some_and(|n| n > 0) {
        return Err(ApiError::unsupported("logprobs", "logprobs are not served"));
    }
    if req.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::unsupported("tools", "tools are not served"));
    }
    if let Some(tc) = &req.tool_choice
        && !matches!(tc.as_str(), Some("none" | "auto"))
    {
        return Err(ApiError::unsupported(
            "tool_choice",
            "tools are not served (tool_choice may only be \"none\" or \"auto\")",
        ));
    }
    if let Some(f) = &req.response_format
        && f.kind != "text"
    {
        return Err(ApiError::unsupported(
            "response_format",
            format!("response_format {:?} is not served (only \"text\")", f.kind),
        ));
    }
    if req.messages.is_empty() {
        return Err(ApiError::bad_param(
            "messages",
            "messages must not be empty",
        ));
    }
    let max = req.max_completion_tokens.or(sampling.max_tokens);
    // a chat answer may run until the context is full unless the request says otherwise
    let params = gen_params(&sampling, max, usize::MAX, d)?;
    Ok((req.messages, params, sampling))
}

/// A checked `/v1/completions` body: the raw prompt (tokenized later), the
/// generation settings and the sampling fields.
pub fn check_completion(
    body: &[u8],
    d: &Defaults,
) -> Result<(Value, GenParams, Sampling), ApiError> {
    let (req, sampling): (CompletionRequest, Sampling) = parse(body)?;
    log_request("completion", &sampling);
    if req.echo == Some(true) {
        return Err(ApiError::unsupported("echo", "echo is not served"));
    }
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "suffix is not served"));
    }
    if req.logprobs.is_some_and(|n| n > 0) {
        return Err(ApiError::unsupported("logprobs", "logprobs are not served"));
    }
    if req.best_of.is_some_and(|n| n != 1) {
        return Err(ApiError::unsupported("best_of", "only best_of=1 is served"));
    }
    // OpenAI's default for completions is 16 tokens
    let params = gen_params(&sampling, sampling.max_tokens, 16, d)?;
    Ok((req.prompt, params, sampling))
}

/// The body as the endpoint's fields `T` and the shared [`Sampling`];
/// every failure is an OpenAI-style 400 naming the field at fault.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<(T, Sampling), ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "invalid request: the body must be a JSON object",
        ));
    }
    Ok((typed(&v)?, typed(&v)?))
}

/// `v` as `T`, a 400 naming the field at fault otherwise.
fn typed<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_param(path.clone(), format!("{path}: {inner}"))
        }
    })
}

/// Names what the server does not use (one model; no per-user state).
fn log_request(kind: &str, s: &Sampling) {
    tracing::debug!(model = ?s.model, user = ?s.user, stream = ?s.stream, "{kind} request");
}
