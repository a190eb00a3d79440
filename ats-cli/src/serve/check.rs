//! The server's request handling on a body's bytes, without HTTP or an
//! engine: what each endpoint does before it queues a job (the JSON read as
//! the endpoint's fields, tools, `tool_choice` and `response_format`
//! checked, image data URLs decoded and preprocessed, the prompt rendered
//! with the chat template and tokenized, grammars compiled). The fuzz target
//! `server_request` drives it; the handlers call the same functions.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use ats_core::chat::ChatTemplate;
use ats_core::spec::ModelSpec;

use super::errors::ApiError;
use super::params::Defaults;
use super::prompt::{PreparedChat, Prompter};
use super::request::{check_chat, check_completion};
use crate::vision::VisionFront;

/// An endpoint whose bodies [`RequestChecker::check`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/embeddings`.
    Embeddings,
}

impl Endpoint {
    /// Every endpoint that reads a body.
    pub const ALL: [Endpoint; 4] = [
        Endpoint::Chat,
        Endpoint::Completions,
        Endpoint::Responses,
        Endpoint::Embeddings,
    ];
}

/// An accepted body, as the engine would get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Tokens of each prompt (images included); embeddings may have many.
    pub prompt_tokens: Vec<usize>,
    /// The answer's token limit (`None` for embeddings).
    pub max_tokens: Option<usize>,
    /// Whether a grammar constrains the answer (`response_format`, tools).
    pub constrained: bool,
}

/// A refused body: the HTTP status and the error the client reads.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// HTTP status.
    pub status: u16,
    /// The message.
    pub message: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// The JSON body the client gets (`{"error": {...}}`), boxed to keep
    /// the error small.
    pub body: Box<serde_json::Value>,
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal {
            status: e.status.as_u16(),
            body: Box::new(e.json()),
            message: e.message,
            param: e.param,
        }
    }
}

/// What the server's checks need: its prompter (tokenizer, template,
/// grammars, projector) and its defaults and limits.
pub struct RequestChecker {
    prompter: Prompter,
    defaults: Defaults,
}

impl RequestChecker {
    /// The server of the model at `model` (with the vision projector at
    /// `mmproj`, when given: image parts are then decoded), greedy by
    /// default, with prompts of at most `max_prompt_tokens` and answers of
    /// at most `max_tokens`.
    pub fn open(
        model: &Path,
        mmproj: Option<&Path>,
        max_prompt_tokens: usize,
        max_tokens: usize,
    ) -> Result<RequestChecker> {
        let spec = Arc::new(
            ModelSpec::open(model).with_context(|| format!("cannot open {}", model.display()))?,
        );
        let tokenizer = ats_core::Tokenizer::from_gguf(&spec.gguf.metadata)?;
        let template = ChatTemplate::from_gguf(&spec.gguf.metadata).map_err(|e| e.to_string());
        let vision = match mmproj {
            // no embedding is ever cached here: nothing is encoded
            Some(p) => Some(Arc::new(VisionFront::open(
                spec.clone(),
                p,
                None,
                None,
                max_prompt_tokens,
                0,
            )?)),
            None => None,
        };
        let vocab = tokenizer.vocab_size();
        Ok(RequestChecker {
            prompter: Prompter::new(tokenizer, template, max_prompt_tokens, vision),
            defaults: Defaults {
                sampler: ats_core::SamplerConfig::greedy(),
                seed: Some(1),
                max_tokens,
                vocab,
                template_kwargs: Default::default(),
            },
        })
    }

    /// What `endpoint` makes of `body` before queueing it: the prompt and
    /// settings, or the refusal the client would get.
    pub fn check(&self, endpoint: Endpoint, body: &[u8]) -> Result<Checked, Refusal> {
        let (d, p) = (&self.defaults, &self.prompter);
        Ok(match endpoint {
            Endpoint::Chat => chat(p.prepare_chat(check_chat(body, d)?)?),
            Endpoint::Responses => chat(super::responses::check(body, d, p)?),
            Endpoint::Completions => {
                let (prompt, params, _) = check_completion(body, d)?;
                Checked {
                    prompt_tokens: vec![p.completion(prompt)?.len()],
                    max_tokens: Some(params.max_tokens),
                    constrained: params.constraint.is_some(),
                }
            }
            Endpoint::Embeddings => Checked {
                prompt_tokens: super::embeddings::check(body, p)?
                    .0
                    .iter()
                    .map(Vec::len)
                    .collect(),
                max_tokens: None,
                constrained: false,
            },
        })
    }
}

fn chat(c: PreparedChat) -> Checked {
    Checked {
        prompt_tokens: vec![c.prompt.n_tokens()],
        max_tokens: Some(c.params.max_tokens),
        constrained: c.params.constraint.is_some(),
    }
}
