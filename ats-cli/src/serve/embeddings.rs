//! `POST /v1/embeddings`: each input's final hidden states pooled
//! (`--pooling`) and normalised, as OpenAI's API returns them: a list of
//! floats, or base64 of little-endian f32 (what the official Python client
//! asks for by default).

use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::errors::ApiError;
use super::prompt::Prompter;
use super::queue::EmbedJob;
use super::request::parse_object;
use super::routes::{App, prepared, read_body, respond};
use super::wire::PromptInput;

/// Most inputs in one request (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// The request body.
#[derive(Debug, Deserialize)]
struct EmbeddingRequest {
    /// A string, a list of strings, a list of token ids, or a list of such lists.
    input: Value,
    /// `float` (default) or `base64`.
    encoding_format: Option<String>,
    /// Fewer dimensions (not served: the model's width only).
    dimensions: Option<u64>,
}

/// One embedding of the answer.
#[derive(Debug, Serialize)]
struct EmbeddingItem {
    object: &'static str,
    index: usize,
    embedding: Value,
}

/// Token counts.
#[derive(Debug, Serialize)]
struct EmbeddingUsage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// The answer.
#[derive(Debug, Serialize)]
struct EmbeddingList {
    object: &'static str,
    data: Vec<EmbeddingItem>,
    model: String,
    usage: EmbeddingUsage,
}

/// The handler.
pub async fn embeddings(State(app): State<Arc<App>>, headers: HeaderMap, body: Body) -> Response {
    respond(answer(app, headers, body).await)
}

async fn answer(app: Arc<App>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let body: Bytes = read_body(&app, &headers, body).await?;
    let (inputs, base64) = prepared(&app, body, |body, _, p| check(body, p)).await?;
    let tokens: usize = inputs.iter().map(Vec::len).sum();
    let rx = app.queue.embed(EmbedJob {
        id: app.id("embd"),
        inputs,
        pooling: app.pooling,
    })?;
    let vectors = rx
        .await
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?
        .map_err(ApiError::internal)?;
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| EmbeddingItem {
            object: "embedding",
            index,
            embedding: encode(&v, base64),
        })
        .collect();
    Ok(Json(EmbeddingList {
        object: "list",
        data,
        model: app.model.clone(),
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
    .into_response())
}

/// The body's inputs as token ids (each within the prompt limit) and
/// whether the answer is base64.
pub(super) fn check(body: &[u8], p: &Prompter) -> Result<(Vec<Vec<u32>>, bool), ApiError> {
    let req: EmbeddingRequest = parse_object(body)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("encoding_format {other:?}: give \"float\" or \"base64\""),
            ));
        }
    };
    if req.dimensions.is_some() {
        return Err(ApiError::unsupported(
            "dimensions",
            "dimensions is not served: embeddings have the model's width",
        ));
    }
    let inputs = split_inputs(req.input)?;
    let ids = inputs
        .into_iter()
        .map(|i| p.completion(i).map_err(|e| rename(e, "input")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ids, base64))
}

/// The prompter's errors name `prompt`; here the field is `input`.
fn rename(mut e: ApiError, param: &str) -> ApiError {
    if e.param.as_deref() == Some("prompt") {
        e.param = Some(param.into());
        e.message = e.message.replace("prompt", "input");
    }
    e
}

/// `input` as prompts: a string, a list of strings, a list of ids, or a
/// list of lists of ids.
fn split_inputs(input: Value) -> Result<Vec<PromptInput>, ApiError> {
    let bad = || {
        ApiError::bad_param(
            "input",
            "input must be a string, a list of strings, a list of token ids or a list of such lists",
        )
    };
    let one = |v: Value| -> Result<PromptInput, ApiError> {
        match v {
            Value::String(s) => Ok(PromptInput::Text(s)),
            Value::Array(ids) => ids
                .iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
                .map(PromptInput::Ids)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    };
    let items = match input {
        Value::String(_) => vec![input],
        Value::Array(a) if a.first().is_some_and(Value::is_number) => vec![Value::Array(a)],
        Value::Array(a) => a,
        _ => return Err(bad()),
    };
    if items.is_empty() || items.len() > MAX_INPUTS {
        return Err(ApiError::bad_param(
            "input",
            format!("give 1 to {MAX_INPUTS} inputs, not {}", items.len()),
        ));
    }
    items.into_iter().map(one).collect()
}

/// A vector as JSON floats, or base64 of its little-endian f32 bytes.
fn encode(v: &[f32], base64: bool) -> Value {
    if base64 {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        Value::from(v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_of_every_shape() {
        let n = |v: Value| split_inputs(v).map(|x| x.len());
        assert_eq!(n(serde_json::json!("a")).unwrap(), 1);
        assert_eq!(n(serde_json::json!(["a", "b"])).unwrap(), 2);
        assert_eq!(n(serde_json::json!([1, 2, 3])).unwrap(), 1);
        assert_eq!(n(serde_json::json!([[1, 2], [3]])).unwrap(), 2);
        for bad in [
            serde_json::json!(3),
            serde_json::json!([]),
            serde_json::json!([1, "a"]),
            serde_json::json!([-1]),
            serde_json::json!({"a": 1}),
        ] {
            assert_eq!(
                split_inputs(bad).unwrap_err().param.as_deref(),
                Some("input")
            );
        }
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let Value::String(s) = encode(&[1.0, -2.5], true) else {
            panic!("a string")
        };
        let bytes = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        assert_eq!(bytes[..4], 1.0f32.to_le_bytes());
        assert_eq!(bytes[4..], (-2.5f32).to_le_bytes());
        assert_eq!(encode(&[0.5], false), serde_json::json!([0.5]));
    }
}
