//! OpenAI's wire format. Requests accept the fields OpenAI clients send
//! (unknown ones are ignored, as OpenAI's own server and llama.cpp's do) but
//! every known field must have its documented type; message content is
//! checked by hand in `prompt.rs` for precise error messages. A request body
//! is read twice from one JSON value: as the endpoint's own fields and as
//! [`Sampling`] (serde's `flatten` would lose the path of a bad field).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with the token counts.
    pub include_usage: Option<bool>,
}

/// `response_format`.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The schema, for `json_schema`.
    pub json_schema: Option<JsonSchemaFormat>,
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name (not used).
    #[allow(dead_code)]
    pub name: Option<String>,
    /// The JSON schema the answer must match.
    pub schema: Option<Value>,
    /// OpenAI's strict mode: the schema is always enforced here.
    #[allow(dead_code)]
    pub strict: Option<bool>,
}

/// A tool in `tools`.
#[derive(Debug, Clone, Deserialize)]
pub struct Tool {
    /// Only `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function.
    pub function: Option<FunctionDef>,
}

/// A function the model may call.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// A JSON schema of its arguments.
    pub parameters: Option<Value>,
    /// OpenAI's strict mode: arguments are always held to the schema when
    /// a call is required.
    #[allow(dead_code)]
    pub strict: Option<bool>,
}

/// A call in an assistant message (`tool_calls`), in requests and answers.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct WireToolCall {
    /// The call's id.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What was called.
    pub function: FunctionCall,
}

/// The function and arguments of a call.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct FunctionCall {
    /// The function.
    pub name: String,
    /// Its arguments, a JSON object written as a string.
    pub arguments: String,
}

/// A streamed piece of a call: its index among the answer's calls, with
/// the id, type and function in its first (here: only) delta.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallDelta {
    /// Which call.
    pub index: usize,
    /// The call's id.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Name and arguments.
    pub function: FunctionCall,
}

/// A token's log-probability in a chat answer.
#[derive(Debug, Clone, Serialize)]
pub struct ChatTokenLogprob {
    /// The token's text (invalid UTF-8 replaced).
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The most likely tokens there (empty for each alternative itself).
    pub top_logprobs: Vec<TopLogprob>,
}

/// An alternative token.
#[derive(Debug, Clone, Serialize)]
pub struct TopLogprob {
    /// Its text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A chat choice's `logprobs`.
#[derive(Debug, Clone, Serialize)]
pub struct ChatLogprobs {
    /// One per token of the content.
    pub content: Vec<ChatTokenLogprob>,
}

/// A text completion's `logprobs` (the legacy shape).
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompletionLogprobs {
    /// The tokens' texts.
    pub tokens: Vec<String>,
    /// Their log-probabilities.
    pub token_logprobs: Vec<f32>,
    /// Per token, the alternatives by text.
    pub top_logprobs: Vec<serde_json::Map<String, Value>>,
    /// Where each token starts in the text.
    pub text_offset: Vec<usize>,
}

/// Sampling and stopping fields shared by both endpoints (`null` means unset,
/// as in OpenAI's API). `top_k`, `min_p`, `repeat_penalty`, `repeat_last_n`
/// and `ignore_eos` are llama.cpp's extensions. Numbers are read as f64 so
/// that one too large for the sampler is named as sent.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    /// Model name (any name is accepted: the server has one model).
    pub model: Option<String>,
    /// Stream server-sent events.
    pub stream: Option<bool>,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Most tokens to generate.
    pub max_tokens: Option<u64>,
    /// Temperature (0: greedy).
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Top-k (0: off).
    pub top_k: Option<u64>,
    /// Min-p (0: off).
    pub min_p: Option<f64>,
    /// Repetition penalty (1: off).
    pub repeat_penalty: Option<f64>,
    /// Tokens the penalties look back over (llama.cpp's extension).
    pub repeat_last_n: Option<u64>,
    /// Random seed (random when unset).
    pub seed: Option<i64>,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// Number of choices (only 1).
    pub n: Option<u64>,
    /// End user id (logged, not used).
    pub user: Option<String>,
    /// OpenAI's presence penalty, -2 to 2.
    pub presence_penalty: Option<f64>,
    /// OpenAI's frequency penalty, -2 to 2.
    pub frequency_penalty: Option<f64>,
    /// Token biases: token ids (as strings) to -100..100, added to the logits.
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// The newer name of `max_tokens`.
    pub max_completion_tokens: Option<u64>,
    /// Report the answer's tokens' log-probabilities.
    pub logprobs: Option<bool>,
    /// How many alternatives to report per token (0 to 20).
    pub top_logprobs: Option<u64>,
    /// Functions the model may call.
    pub tools: Option<Vec<Tool>>,
    /// `none`, `auto`, `required` or `{"type": "function", "function": {"name": ..}}`.
    pub tool_choice: Option<Value>,
    /// Whether several calls may come in one answer (one call is made at most
    /// when a call is required).
    #[allow(dead_code)]
    pub parallel_tool_calls: Option<bool>,
    /// `text`, `json_object` or `json_schema`.
    pub response_format: Option<ResponseFormat>,
    /// How much a reasoning model thinks (`low`, `medium`, `high`): the
    /// chat template's `reasoning_effort` (gpt-oss's system message).
    pub reasoning_effort: Option<String>,
    /// More variables for the chat template (vLLM's and llama-server's
    /// field: Qwen3's `enable_thinking`, ...).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
}

/// One message; `content` is a string or a list of parts, checked in `prompt.rs`.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: String,
    /// A string, a list of content parts, or null (an assistant's tool call).
    pub content: Option<Value>,
    /// A participant name: checked for its type, not used (templates take none).
    #[allow(dead_code)]
    pub name: Option<String>,
    /// The calls an assistant message made.
    pub tool_calls: Option<Vec<WireToolCall>>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// An assistant message's reasoning, as this server's answers give it.
    pub reasoning_content: Option<String>,
}

/// A completion's `prompt`: a string, a list of strings (only one is
/// served) or a list of token ids, read without a JSON tree in between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptInput {
    /// Text.
    Text(String),
    /// Several texts (refused: one prompt per request).
    Texts(usize),
    /// Token ids (each checked against the vocabulary later).
    Ids(Vec<u32>),
}

/// What `prompt` must be, for messages.
const PROMPT_EXPECTED: &str = "a string, a list of one string, or a list of token ids";

impl<'de> Deserialize<'de> for PromptInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PromptInput;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(PROMPT_EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PromptInput, E> {
                Ok(PromptInput::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<PromptInput, E> {
                Ok(PromptInput::Text(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<PromptInput, A::Error> {
                #[derive(Deserialize)]
                #[serde(untagged)]
                enum Item {
                    Id(u32),
                    Text(String),
                }
                let bad = || serde::de::Error::custom(format!("prompt must be {PROMPT_EXPECTED}"));
                let mut ids = Vec::new();
                let (mut text, mut n_texts) = (None, 0usize);
                while let Some(item) = seq.next_element::<Item>().map_err(|_| bad())? {
                    match item {
                        Item::Id(id) if n_texts == 0 => ids.push(id),
                        Item::Text(t) if ids.is_empty() => {
                            text.get_or_insert(t);
                            n_texts += 1;
                        }
                        _ => return Err(bad()),
                    }
                }
                Ok(match (text, n_texts) {
                    (Some(t), 1) => PromptInput::Text(t),
                    (Some(_), n) => PromptInput::Texts(n),
                    (None, _) => PromptInput::Ids(ids),
                })
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<PromptInput, E> {
                Err(E::custom(format!("prompt must be {PROMPT_EXPECTED}")))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<PromptInput, E> {
                Err(E::custom(format!("prompt must be {PROMPT_EXPECTED}")))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<PromptInput, E> {
                Err(E::custom(format!("prompt must be {PROMPT_EXPECTED}")))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<PromptInput, E> {
                Err(E::custom(format!("prompt must be {PROMPT_EXPECTED}")))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<PromptInput, E> {
                Err(E::custom(format!("prompt must be {PROMPT_EXPECTED}")))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                _: A,
            ) -> Result<PromptInput, A::Error> {
                Err(serde::de::Error::custom(format!(
                    "prompt must be {PROMPT_EXPECTED}"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// A string, a list of one string, or a list of token ids.
    pub prompt: PromptInput,
    /// Repeat the prompt in the answer (not served).
    pub echo: Option<bool>,
    /// Text after the completion (not served).
    pub suffix: Option<String>,
    /// Report each token's log-probability with this many alternatives (0 to 20).
    pub logprobs: Option<u64>,
    /// Candidates to choose from (only 1).
    pub best_of: Option<u64>,
}

/// Token counts.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// The sum.
    pub total_tokens: usize,
    /// Of the prompt tokens, those taken from the KV cache.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's breakdown of the prompt tokens.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the cache instead of computed.
    pub cached_tokens: usize,
}

impl Usage {
    /// Counts for a prompt (`cached` of its tokens reused) and an answer.
    pub fn new(prompt: usize, cached: usize, completion: usize) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: cached,
            },
        }
    }
}

/// llama.cpp's `timings` object, which its clients show, with how many
/// bytes of an unfinished character a token limit held back and what the
/// prompt's images took.
#[derive(Debug, Clone, Serialize)]
pub struct TimingsOut {
    /// Prompt tokens taken from the cache.
    pub cache_n: usize,
    /// Prompt tokens processed.
    pub prompt_n: usize,
    /// Milliseconds of prompt processing.
    pub prompt_ms: f64,
    /// Prompt tokens per second.
    pub prompt_per_second: f64,
    /// Tokens generated.
    pub predicted_n: usize,
    /// Milliseconds of decoding.
    pub predicted_ms: f64,
    /// Generation tokens per second.
    pub predicted_per_second: f64,
    /// Bytes the last tokens began of a character they did not finish
    /// (a limit cut it): not in the text, which has whole characters only.
    pub held_back_bytes: usize,
    /// The images: how many, how many from the cache, their tokens, encode
    /// time, where the encoder ran and what it planned to hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<crate::vision::VisionUse>,
}

impl TimingsOut {
    /// The timings of a finished generation.
    pub fn of(f: &super::queue::Finished) -> Self {
        TimingsOut {
            vision: f.vision.clone(),
            ..TimingsOut::new(&f.timings, f.held_back_bytes)
        }
    }

    /// The timings of a generation that held back `held_back_bytes`.
    pub fn new(t: &ats_sched::session::Timings, held_back_bytes: usize) -> Self {
        TimingsOut {
            cache_n: t.cached_tokens,
            prompt_n: t.computed_prompt_tokens(),
            prompt_ms: t.prompt_ms,
            prompt_per_second: t.prompt_tps(),
            predicted_n: t.gen_tokens,
            predicted_ms: t.decode_ms,
            predicted_per_second: t.gen_tps(),
            held_back_bytes,
            vision: None,
        }
    }
}

/// The assistant's answer in a non-streamed chat completion.
#[derive(Debug, Clone, Serialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: &'static str,
    /// The answer's text (null when it is only calls).
    pub content: Option<String>,
    /// The model's reasoning, where the model's format sets it apart
    /// (harmony's `analysis` channel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// The calls it makes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<WireToolCall>>,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChoice {
    /// Always 0.
    pub index: usize,
    /// The answer.
    pub message: AssistantMessage,
    /// `stop`, `length` or `tool_calls`.
    pub finish_reason: &'static str,
    /// The tokens' log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
}

/// A non-streamed chat completion.
#[derive(Debug, Clone, Serialize)]
pub struct ChatCompletion {
    /// `chatcmpl-...`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model's name.
    pub model: String,
    /// One choice.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
    /// Speed.
    pub timings: TimingsOut,
}

/// A streamed delta.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Delta {
    /// `assistant` in the first chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// New text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// New reasoning (see [`AssistantMessage::reasoning_content`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Calls (each whole, in one delta).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One choice of a chat completion chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: usize,
    /// What is new.
    pub delta: Delta,
    /// Set in the last chunk of the choice.
    pub finish_reason: Option<&'static str>,
    /// The log-probabilities of this chunk's tokens, when asked for.
    pub logprobs: Option<ChatLogprobs>,
}

/// A streamed chat completion chunk.
#[derive(Debug, Clone, Serialize)]
pub struct ChatChunk {
    /// The same id in every chunk.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model's name.
    pub model: String,
    /// Zero (the usage chunk) or one choice.
    pub choices: Vec<ChunkChoice>,
    /// Token counts, in the usage chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Speed, in the last chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<TimingsOut>,
}

/// One choice of a text completion (streamed or not).
#[derive(Debug, Clone, Serialize)]
pub struct CompletionChoice {
    /// The text (new text, when streamed).
    pub text: String,
    /// Always 0.
    pub index: usize,
    /// The tokens' log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length`; null in streamed chunks before the last.
    pub finish_reason: Option<&'static str>,
}

/// A text completion or one streamed chunk of it.
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    /// `cmpl-...`.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The model's name.
    pub model: String,
    /// Zero (the usage chunk) or one choice.
    pub choices: Vec<CompletionChoice>,
    /// Token counts (non-streamed, or the usage chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Speed (non-streamed, or the last chunk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<TimingsOut>,
}

/// An entry of `GET /v1/models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelCard {
    /// The name requests may use.
    pub id: String,
    /// `model`.
    pub object: &'static str,
    /// Unix seconds (when the server started).
    pub created: u64,
    /// `ats`.
    pub owned_by: &'static str,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelList {
    /// `list`.
    pub object: &'static str,
    /// The one model.
    pub data: Vec<ModelCard>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_request_accepts_extra_fields_and_nulls() {
        let v: Value = serde_json::from_str(
            r#"{"model":"x","messages":[{"role":"user","content":"hi"}],
                "stream":true,"stream_options":{"include_usage":true},
                "user":"u","n":1,"temperature":null,"metadata":{"a":1}}"#,
        )
        .unwrap();
        let r = ChatRequest::deserialize(&v).unwrap();
        let s = Sampling::deserialize(&v).unwrap();
        assert_eq!(r.messages.len(), 1);
        assert_eq!(s.stream, Some(true));
        assert_eq!(s.stream_options.unwrap().include_usage, Some(true));
        assert_eq!(s.temperature, None);
        assert_eq!(s.n, Some(1));
    }

    #[test]
    fn wrong_types_are_found_with_their_path() {
        let v: Value = serde_json::from_str(
            r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#,
        )
        .unwrap();
        let err = serde_path_to_error::deserialize::<_, Sampling>(&v).unwrap_err();
        assert_eq!(err.path().to_string(), "temperature");
        let v: Value = serde_json::from_str(r#"{"messages":[{"role":7}]}"#).unwrap();
        let err = serde_path_to_error::deserialize::<_, ChatRequest>(&v).unwrap_err();
        assert_eq!(err.path().to_string(), "messages[0].role");
    }

    #[test]
    fn stop_is_a_string_or_a_list() {
        let one: Stop = serde_json::from_str(r#""\n""#).unwrap();
        assert!(matches!(one, Stop::One(s) if s == "\n"));
        let many: Stop = serde_json::from_str(r#"["a","b"]"#).unwrap();
        assert!(matches!(many, Stop::Many(v) if v == ["a", "b"]));
        assert!(serde_json::from_str::<Stop>("3").is_err());
    }

    #[test]
    fn chunks_serialize_like_openai() {
        let c = ChatChunk {
            id: "chatcmpl-1".into(),
            object: "chat.completion.chunk",
            created: 7,
            model: "m".into(),
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta {
                    content: Some("hi".into()),
                    ..Delta::default()
                },
                finish_reason: None,
                logprobs: None,
            }],
            usage: None,
            timings: None,
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,
                "model":"m","choices":[{"index":0,"delta":{"content":"hi"},
                "finish_reason":null,"logprobs":null}]})
        );
    }
}
