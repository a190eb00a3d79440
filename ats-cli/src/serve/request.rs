//! Request bodies to checked requests: the JSON read as the endpoint's
//! fields and as the shared sampling fields, features this server does not
//! offer refused, generation settings derived. Pure functions of the body's
//! bytes, so the fuzz test (`fuzz.rs`) can drive them directly. The bytes
//! are read straight into typed fields (no JSON tree in between, which for
//! a list of a million token ids would take 32 bytes per id, twice).

use ats_core::grammar::GrammarSpec;
use ats_sched::session::GenParams;
use serde::de::DeserializeOwned;
use serde_json::error::Category;

use super::errors::ApiError;
use super::logprobs;
use super::params::{Defaults, gen_params};
use super::tools::{ToolRequest, check_tools};
use super::wire::{ChatRequest, CompletionRequest, Message, PromptInput, ResponseFormat, Sampling};

/// A checked `/v1/chat/completions` body: the messages and tools (rendered
/// later, on a blocking thread, where grammars are compiled too), the
/// generation settings and the sampling fields.
#[derive(Debug)]
pub struct ChatCheck {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Generation settings (no constraint yet).
    pub params: GenParams,
    /// The sampling fields.
    pub sampling: Sampling,
    /// The grammar `response_format` asks for.
    pub format: Option<GrammarSpec>,
    /// The tools in play, if any.
    pub tools: Option<ToolRequest>,
    /// The chat template's own variables (`chat_template_kwargs`,
    /// `reasoning_effort`).
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
}

/// Checks a `/v1/chat/completions` body.
pub fn check_chat(body: &[u8], d: &Defaults) -> Result<ChatCheck, ApiError> {
    let (req, sampling): (ChatRequest, Sampling) = parse(body)?;
    log_request("chat", &sampling);
    let top = logprobs::chat_request(req.logprobs, req.top_logprobs)?;
    let tools = check_tools(req.tools.as_deref(), req.tool_choice.as_ref())?;
    let format = req
        .response_format
        .as_ref()
        .map(response_grammar)
        .transpose()?
        .flatten();
    if format.is_some() && tools.is_some() {
        return Err(ApiError::unsupported(
            "response_format",
            "response_format with tools is not served: give one, or tool_choice \"none\"",
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
    let mut params = gen_params(&sampling, max, usize::MAX, d)?;
    params.logprobs = top;
    let template_kwargs = template_kwargs(d, req.chat_template_kwargs, req.reasoning_effort)?;
    Ok(ChatCheck {
        messages: req.messages,
        params,
        sampling,
        format,
        tools,
        template_kwargs,
    })
}

/// The efforts `reasoning_effort` may name (OpenAI's).
const EFFORTS: [&str; 5] = ["none", "minimal", "low", "medium", "high"];

/// The server's template variables, then the request's
/// `chat_template_kwargs` over them, then `reasoning_effort`.
fn template_kwargs(
    d: &Defaults,
    asked: Option<serde_json::Map<String, serde_json::Value>>,
    effort: Option<String>,
) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    let asked = asked.unwrap_or_default();
    if let Some(k) = ats_core::chat::reserved_name(&asked) {
        return Err(ApiError::bad_param(
            "chat_template_kwargs",
            format!("{k:?} is set by the server, not by chat_template_kwargs"),
        ));
    }
    let mut kwargs = d.template_kwargs.clone();
    kwargs.extend(asked);
    if let Some(e) = effort {
        if !EFFORTS.contains(&e.as_str()) {
            return Err(ApiError::bad_param(
                "reasoning_effort",
                format!("reasoning_effort must be one of {EFFORTS:?}, not {e:?}"),
            ));
        }
        kwargs.insert("reasoning_effort".into(), e.into());
    }
    Ok(kwargs)
}

/// The grammar of a `response_format` (`None` for plain text).
fn response_grammar(f: &ResponseFormat) -> Result<Option<GrammarSpec>, ApiError> {
    match f.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some(GrammarSpec::JsonObject)),
        "json_schema" => match f.json_schema.as_ref().and_then(|j| j.schema.clone()) {
            Some(schema) => Ok(Some(GrammarSpec::JsonSchema(schema))),
            None => Err(ApiError::bad_param(
                "response_format.json_schema.schema",
                "response_format json_schema needs json_schema.schema",
            )),
        },
        other => Err(ApiError::unsupported(
            "response_format.type",
            format!("response_format {other:?} is not served (text, json_object, json_schema)"),
        )),
    }
}

/// A checked `/v1/completions` body: the raw prompt (tokenized later), the
/// generation settings and the sampling fields.
pub fn check_completion(
    body: &[u8],
    d: &Defaults,
) -> Result<(PromptInput, GenParams, Sampling), ApiError> {
    let (req, sampling): (CompletionRequest, Sampling) = parse(body)?;
    log_request("completion", &sampling);
    if req.echo == Some(true) {
        return Err(ApiError::unsupported("echo", "echo is not served"));
    }
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "suffix is not served"));
    }
    let top = logprobs::completion_request(req.logprobs)?;
    if req.best_of.is_some_and(|n| n != 1) {
        return Err(ApiError::unsupported("best_of", "only best_of=1 is served"));
    }
    // OpenAI's default for completions is 16 tokens
    let mut params = gen_params(&sampling, sampling.max_tokens, 16, d)?;
    params.logprobs = top;
    Ok((req.prompt, params, sampling))
}

/// The body as the endpoint's fields `T` and the shared [`Sampling`];
/// every failure is an OpenAI-style 400 naming the field at fault.
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<(T, Sampling), ApiError> {
    Ok((parse_object(body)?, typed(body)?))
}

/// The body, a JSON object, as `T`; every failure is an OpenAI-style 400
/// naming the field at fault.
pub fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if !body.trim_ascii_start().starts_with(b"{") {
        // a syntax error says so; valid JSON that is not an object is refused as such
        serde_json::from_slice::<serde::de::IgnoredAny>(body).map_err(malformed)?;
        return Err(ApiError::bad_request(
            "invalid request: the body must be a JSON object",
        ));
    }
    typed(body)
}

fn malformed(e: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("malformed JSON: {e}"))
}

/// The body as `T`, a 400 naming the field at fault otherwise.
fn typed<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if matches!(inner.classify(), Category::Syntax | Category::Eof) {
            malformed(inner)
        } else if path == "." {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::bad_param(path.clone(), format!("{path}: {inner}"))
        }
    })?;
    de.end().map_err(malformed)?;
    Ok(v)
}

/// Names what the server does not use (one model; no per-user state).
fn log_request(kind: &str, s: &Sampling) {
    tracing::debug!(model = ?s.model, user = ?s.user, stream = ?s.stream, "{kind} request");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: serde_json::Value) -> Result<ChatCheck, ApiError> {
        let d = Defaults {
            sampler: ats_core::SamplerConfig::greedy(),
            seed: Some(1),
            max_tokens: 16,
            vocab: 100,
            template_kwargs: serde_json::json!({"enable_thinking": true, "x": 1})
                .as_object()
                .cloned()
                .unwrap(),
        };
        check_chat(body.to_string().as_bytes(), &d)
    }

    #[test]
    fn template_kwargs_and_reasoning_effort_become_template_variables() {
        let msgs = serde_json::json!([{"role": "user", "content": "hi"}]);
        let c = check(
            serde_json::json!({"messages": msgs, "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": false}}),
        )
        .unwrap();
        assert_eq!(c.template_kwargs["reasoning_effort"], "low");
        // the request's own over the server's
        assert_eq!(c.template_kwargs["enable_thinking"], false);
        assert_eq!(c.template_kwargs["x"], 1);
        let param = |b: serde_json::Value| check(b).unwrap_err().param.unwrap();
        assert_eq!(
            param(serde_json::json!({"messages": msgs, "reasoning_effort": "extreme"})),
            "reasoning_effort"
        );
        assert_eq!(
            param(serde_json::json!({"messages": msgs, "chat_template_kwargs": {"tools": []}})),
            "chat_template_kwargs"
        );
        assert_eq!(
            param(serde_json::json!({"messages": msgs, "chat_template_kwargs": [1]})),
            "chat_template_kwargs"
        );
    }
}
