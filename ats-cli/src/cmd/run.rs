//! `ats-cli run`: generate text from a prompt, streaming it to standard output.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use ats_core::chat::reasoning::{Reading, ReasoningFormat};
use ats_core::chat::{ChatMessage, TemplateVars};
use ats_core::tokenizer::TokenizerError;
use ats_sched::session::{GenEvent, GenParams};
use clap::Args;
use tracing::info;

use crate::args::{ModelArgs, SampleArgs, TemplateArgs};
use crate::usage::usage_bail;
use crate::{load, logging, report};

/// Generate text.
#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// The prompt.
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file (UTF-8, at most 64 MiB).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long = "chat")]
    chat: bool,
    /// A system message (with --chat).
    #[arg(long = "system", requires = "chat")]
    system: Option<String>,
    #[command(flatten)]
    template: TemplateArgs,
    /// Stop when this text appears (repeatable).
    #[arg(long = "stop")]
    stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
    /// Write the timings as JSON to this file.
    #[arg(long = "timings-json", value_name = "FILE")]
    timings_json: Option<PathBuf>,
}

/// Largest prompt or text file (`run -f`, `perplexity -f`).
pub const MAX_TEXT_FILE: u64 = 64 << 20;

/// Reads `-p` or `-f`.
pub fn prompt_text(prompt: &Option<String>, file: &Option<PathBuf>) -> Result<String> {
    match (prompt, file) {
        (Some(p), _) => Ok(p.clone()),
        (None, Some(f)) => {
            let bytes = ats_core::files::read_bounded(f, MAX_TEXT_FILE, "text files")?;
            String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not UTF-8 text (invalid byte at offset {})",
                    f.display(),
                    e.utf8_error().valid_up_to()
                )
            })
        }
        (None, None) => usage_bail!("give a prompt with -p TEXT or -f FILE"),
    }
}

pub fn run(a: RunArgs) -> Result<()> {
    if a.n_predict == 0 {
        usage_bail!("-n must be at least 1 (tokens to generate)");
    }
    if a.template.chat_template_kwargs.is_some() && !a.chat {
        usage_bail!("--chat-template-kwargs needs --chat (a plain prompt uses no template)");
    }
    let text = prompt_text(&a.prompt, &a.file)?;
    let mut loaded = load::load(&a.model, false)?;
    let session = &mut loaded.session;
    let tok = session.tokenizer()?.clone();
    // a prompt must leave room for one generated token
    let room = session.n_ctx().saturating_sub(1);
    let too_long = |at_least: usize| {
        anyhow::anyhow!(
            "the prompt has at least {at_least} tokens, more than the context of {} leaves room for (-c)",
            room + 1
        )
    };
    // by its length alone, before anything is copied or tokenized
    if tok.min_tokens(text.len()) > room {
        return Err(too_long(tok.min_tokens(text.len())));
    }
    // how a chat answer keeps its reasoning (a plain completion: none)
    let mut reading = Reading::of(ReasoningFormat::None, "");
    let encoded = if a.chat {
        let tpl = session.chat_template()?;
        if tpl.is_fallback() {
            info!("the model has no chat template: using ChatML");
        }
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(ChatMessage::text("system", s));
        }
        msgs.push(ChatMessage::text("user", &text));
        // the message stays plain text: only the template's markup is control tokens
        let vars = TemplateVars {
            tools: Vec::new(),
            kwargs: a.template.kwargs(),
        };
        let g = tpl.render_guarded_with(&msgs, &vars, true, &tok)?;
        reading = Reading::of(ReasoningFormat::of(&tok, Some(tpl)), &g.text);
        tok.encode_guarded(&g.text, g.guards, true, room)
    } else {
        // a plain prompt is the user's own text: control tokens in it are meant
        tok.encode_bounded(&text, true, true, room)
    };
    let ids = match encoded {
        Err(TokenizerError::TooManyTokens { at_least, .. }) => return Err(too_long(at_least)),
        r => r?,
    };
    tracing::debug!(n_tokens = ids.len(), ?ids, "prompt");
    if ids.is_empty() {
        bail!("the prompt is empty after tokenization");
    }
    let params = GenParams {
        max_tokens: a.n_predict,
        sampler: a.sample.config(),
        stop: a.stop.clone(),
        ignore_eos: a.ignore_eos,
        ..Default::default()
    };
    let mut answer = crate::answer::Answer::new().reasoning_apart(reading.splitter());
    let out_gen = session.generate(&ids, &params, &mut |ev| match ev {
        GenEvent::Text(t) => answer.write(t),
        GenEvent::Logprobs(_) => true,
    })?;
    answer.finish()?;
    if !logging::quiet() {
        report::print_timings(loaded.load_ms, &out_gen.timings);
        report::print_memory(session);
        report::print_plan_changes(session);
    }
    if let Some(path) = &a.timings_json {
        let j = serde_json::json!({
            "load_ms": loaded.load_ms,
            "prompt_tokens": out_gen.timings.prompt_tokens,
            "prompt_ms": out_gen.timings.prompt_ms,
            "prompt_tokens_per_s": out_gen.timings.prompt_tps(),
            "gen_tokens": out_gen.timings.gen_tokens,
            "decode_ms": out_gen.timings.decode_ms,
            "gen_tokens_per_s": out_gen.timings.gen_tps(),
            "ttft_ms": out_gen.timings.ttft_ms,
            "stop": out_gen.stop,
            "memory": report::memory_json(session),
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
