//! Requests to prompt token ids: message content checked part by part,
//! images decoded, the model's chat template applied, the prompt limit
//! enforced. Runs on a blocking thread (templates, tokenizing and image
//! decoding cost CPU time).

use ats_core::chat::{ChatMessage, ChatTemplate, ContentPart};
use ats_core::tokenizer::Tokenizer;
use base64::Engine as _;
use serde_json::Value;

use super::errors::ApiError;
use super::wire::Message;

/// What requests are tokenized with.
pub struct Prompter {
    tokenizer: Tokenizer,
    /// The chat template, or why the model has none usable.
    template: Result<ChatTemplate, String>,
    /// Longest accepted prompt, in tokens.
    max_prompt_tokens: usize,
}

/// The message shown for image parts while no projector is loaded.
pub const NO_VISION: &str =
    "this server was started without --mmproj (a vision projector), so it cannot read images";

impl Prompter {
    /// A prompter for a model's tokenizer and template.
    pub fn new(
        tokenizer: Tokenizer,
        template: Result<ChatTemplate, String>,
        max_prompt_tokens: usize,
    ) -> Prompter {
        Prompter {
            tokenizer,
            template,
            max_prompt_tokens,
        }
    }

    /// The token ids of a conversation, rendered with the chat template and
    /// ending with the assistant's turn.
    pub fn chat(&self, messages: &[Message]) -> Result<Vec<u32>, ApiError> {
        if messages.is_empty() {
            return Err(ApiError::bad_param(
                "messages",
                "messages must not be empty",
            ));
        }
        let msgs = messages
            .iter()
            .enumerate()
            .map(|(i, m)| chat_message(i, m))
            .collect::<Result<Vec<_>, _>>()?;
        let template = self.template.as_ref().map_err(|e| {
            ApiError::internal(format!("the model has no usable chat template: {e}"))
        })?;
        let text = template
            .render(&msgs, true)
            .map_err(|e| ApiError::bad_param("messages", e.to_string()))?;
        self.tokenize(&text, "messages")
    }

    /// The token ids of a completion prompt: a string, a list of one
    /// string, or a list of token ids.
    pub fn completion(&self, prompt: &Value) -> Result<Vec<u32>, ApiError> {
        let bad = || {
            ApiError::bad_param(
                "prompt",
                "prompt must be a string, a list of one string, or a list of token ids",
            )
        };
        let ids = match prompt {
            Value::String(s) => self.tokenize(s, "prompt")?,
            Value::Array(items) => match items.as_slice() {
                [Value::String(s)] => self.tokenize(s, "prompt")?,
                [Value::String(_), ..] => {
                    return Err(ApiError::unsupported(
                        "prompt",
                        "one prompt per request: send the prompts one by one",
                    ));
                }
                _ => {
                    let ids = items
                        .iter()
                        .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()))
                        .collect::<Option<Vec<u32>>>()
                        .ok_or_else(bad)?;
                    let vocab = self.tokenizer.vocab_size();
                    if let Some(&t) = ids.iter().find(|&&t| t as usize >= vocab) {
                        return Err(ApiError::bad_param(
                            "prompt",
                            format!("token id {t} is outside the vocabulary of {vocab}"),
                        ));
                    }
                    ids
                }
            },
            _ => return Err(bad()),
        };
        self.check_len(ids, "prompt")
    }

    fn tokenize(&self, text: &str, param: &str) -> Result<Vec<u32>, ApiError> {
        let ids = self
            .tokenizer
            .encode(text, true, true)
            .map_err(|e| ApiError::bad_param(param, format!("cannot tokenize: {e}")))?;
        self.check_len(ids, param)
    }

    fn check_len(&self, ids: Vec<u32>, param: &str) -> Result<Vec<u32>, ApiError> {
        if ids.is_empty() {
            return Err(ApiError::bad_param(param, "the prompt is empty"));
        }
        if ids.len() > self.max_prompt_tokens {
            return Err(ApiError {
                code: Some("context_length_exceeded"),
                ..ApiError::bad_param(
                    param,
                    format!(
                        "the prompt has {} tokens, more than this server's limit of {} (--max-prompt-tokens, -c)",
                        ids.len(),
                        self.max_prompt_tokens
                    ),
                )
            });
        }
        Ok(ids)
    }
}

/// One wire message as a template message. `developer` is OpenAI's newer
/// name for `system`.
fn chat_message(i: usize, m: &Message) -> Result<ChatMessage, ApiError> {
    let role = match m.role.as_str() {
        "developer" => "system",
        r @ ("system" | "user" | "assistant" | "tool") => r,
        other => {
            return Err(ApiError::bad_param(
                format!("messages[{i}].role"),
                format!("unknown role {other:?} (system, developer, user, assistant, tool)"),
            ));
        }
    };
    let param = format!("messages[{i}].content");
    let content = match &m.content {
        Some(Value::String(s)) => vec![ContentPart::Text(s.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| content_part(&format!("{param}[{j}]"), p))
            .collect::<Result<Vec<_>, _>>()?,
        // an assistant turn that only called tools
        None | Some(Value::Null) if role == "assistant" => Vec::new(),
        None | Some(Value::Null) => {
            return Err(ApiError::bad_param(param, "content is missing"));
        }
        Some(_) => {
            return Err(ApiError::bad_param(
                param,
                "content must be a string or a list of content parts",
            ));
        }
    };
    Ok(ChatMessage::new(role, content))
}

/// `{"type": "text", "text": ...}` or `{"type": "image_url", "image_url": {"url": ...}}`.
fn content_part(param: &str, p: &Value) -> Result<ContentPart, ApiError> {
    let kind = p
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_param(param, "a content part needs a string \"type\""))?;
    match kind {
        "text" => match p.get("text") {
            Some(Value::String(t)) => Ok(ContentPart::Text(t.clone())),
            _ => Err(ApiError::bad_param(
                format!("{param}.text"),
                "a text part needs a string \"text\"",
            )),
        },
        "image_url" => {
            // `image_url` is an object with `url`; some clients send the string itself
            let url = match p.get("image_url") {
                Some(Value::String(u)) => u.as_str(),
                Some(Value::Object(o)) => {
                    o.get("url").and_then(Value::as_str).ok_or_else(|| {
                        ApiError::bad_param(
                            format!("{param}.image_url.url"),
                            "an image part needs a string \"url\"",
                        )
                    })?
                }
                _ => {
                    return Err(ApiError::bad_param(
                        format!("{param}.image_url"),
                        "an image part needs \"image_url\": {\"url\": \"data:image/...;base64,...\"}",
                    ));
                }
            };
            let param = format!("{param}.image_url.url");
            let bytes = data_url_bytes(url).map_err(|e| ApiError::bad_param(&param, e))?;
            let image = ats_vision::preprocess::decode_image(&bytes).map_err(|e| {
                ApiError::bad_param(&param, format!("cannot decode the image: {e}"))
            })?;
            image_part(&param, image)
        }
        other => Err(ApiError::unsupported(
            format!("{param}.type"),
            format!("content parts of type {other:?} are not served (text, image_url)"),
        )),
    }
}

/// Where a decoded image joins the prompt. With a vision projector loaded
/// (ats-vision's VLM pipeline behind `--mmproj`) the image travels with the
/// job and the template gets its placeholder (`ContentPart::Image`); this
/// server has no projector, so an image is a 400 that says so.
fn image_part(param: &str, image: image::RgbImage) -> Result<ContentPart, ApiError> {
    tracing::debug!("{param}: a {}x{} image", image.width(), image.height());
    Err(ApiError::unsupported(param, NO_VISION))
}

/// The bytes of a `data:[<media type>][;base64],<data>` URL. Remote URLs are
/// not fetched: the server never makes requests of its own.
pub fn data_url_bytes(url: &str) -> Result<Vec<u8>, String> {
    let rest = url.strip_prefix("data:").ok_or_else(|| {
        "images must be data URLs (data:image/png;base64,...): the server does not fetch remote URLs"
            .to_string()
    })?;
    let (header, data) = rest
        .split_once(',')
        .ok_or_else(|| "a data URL needs a ',' before its data".to_string())?;
    if !header.split(';').any(|p| p.eq_ignore_ascii_case("base64")) {
        return Err("image data URLs must be base64 (data:image/png;base64,...)".into());
    }
    // clients wrap long base64 lines now and then
    let clean: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| format!("the image data is not valid base64: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_decode() {
        assert_eq!(
            data_url_bytes("data:image/png;base64,aGVsbG8=").unwrap(),
            b"hello"
        );
        assert_eq!(
            data_url_bytes("data:image/png;base64,aGVs\nbG8=").unwrap(),
            b"hello"
        );
        assert!(data_url_bytes("https://example.invalid/x.png").is_err());
        assert!(data_url_bytes("data:image/png,hello").is_err());
        assert!(data_url_bytes("data:image/png;base64,@@@").is_err());
        assert!(data_url_bytes("data:image/png;base64").is_err());
    }

    #[test]
    fn content_parts_are_checked() {
        let text = serde_json::json!({"type": "text", "text": "hi"});
        assert_eq!(
            content_part("p", &text).unwrap(),
            ContentPart::Text("hi".into())
        );
        let no_text = serde_json::json!({"type": "text", "text": 3});
        assert_eq!(
            content_part("p", &no_text).unwrap_err().param.unwrap(),
            "p.text"
        );
        let audio = serde_json::json!({"type": "input_audio"});
        assert!(
            content_part("p", &audio)
                .unwrap_err()
                .message
                .contains("input_audio")
        );
        let junk = serde_json::json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}});
        assert!(
            content_part("p", &junk)
                .unwrap_err()
                .message
                .contains("cannot decode the image")
        );
    }
}
