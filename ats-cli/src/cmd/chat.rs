//! `ats-cli chat`: an interactive chat in the terminal with the model's
//! chat template. Each turn re-renders the conversation and feeds only what
//! the KV cache does not hold yet. Ctrl-C stops the current answer, not the
//! program: a signal handler sets a flag the generation callback reads.

use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use ats_core::chat::{ChatMessage, ChatTemplate};
use ats_core::tokenizer::TokenizerError;
use ats_sched::session::{GenEvent, GenParams, StopReason};
use clap::Args;
use tracing::info;

use crate::args::{ModelArgs, SampleArgs};
use crate::usage::usage_bail;
use crate::{load, logging, report};

const EXAMPLES: &str = "Examples:
  ats-cli chat -m SmolLM2-135M-Instruct.Q4_1.gguf
  ats-cli chat -m model.gguf --vram 2G --system \"You are terse.\" --temp 0.7

In the chat: /reset forgets the conversation, /exit (or Ctrl-D) quits,
/image PATH attaches an image to the next message (vision models).
Ctrl-C stops the current answer.";

/// Chat with the model.
#[derive(Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sample: SampleArgs,
    /// A system message that starts the conversation.
    #[arg(long = "system")]
    system: Option<String>,
    /// Most tokens per answer (default: until the model stops or the context is full).
    #[arg(short = 'n', long = "n-predict")]
    n_predict: Option<usize>,
    /// Keep answering past end-of-generation tokens (until -n or a full context).
    #[arg(long = "ignore-eos")]
    ignore_eos: bool,
}

/// Set by Ctrl-C; the generation callback stops when it sees it.
static STOP: AtomicBool = AtomicBool::new(false);
/// An answer is being generated (Ctrl-C stops it rather than showing a hint).
static GENERATING: AtomicBool = AtomicBool::new(false);

/// What a line typed at the prompt asks for.
#[derive(Debug, PartialEq, Eq)]
enum Input<'a> {
    /// A user message.
    Message(&'a str),
    /// Attach an image.
    Image(&'a str),
    /// Forget the conversation.
    Reset,
    /// Quit.
    Exit,
    /// Nothing (an empty line).
    Empty,
    /// A mistyped command.
    Unknown(&'a str),
}

fn parse_input(line: &str) -> Input<'_> {
    let l = line.trim();
    if l.is_empty() {
        return Input::Empty;
    }
    if !l.starts_with('/') {
        return Input::Message(line.trim_end_matches(['\n', '\r']));
    }
    let (cmd, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
    match cmd {
        "/exit" | "/quit" => Input::Exit,
        "/reset" | "/clear" => Input::Reset,
        "/image" => Input::Image(rest.trim()),
        _ => Input::Unknown(cmd),
    }
}

pub fn run(a: ChatArgs) -> Result<()> {
    if a.n_predict == Some(0) {
        usage_bail!("-n must be at least 1 (tokens per answer)");
    }
    let mut loaded = load::load(&a.model, false)?;
    let session = &mut loaded.session;
    let tok = session.tokenizer()?.clone();
    let tpl = ChatTemplate::from_gguf(&session.spec().gguf.metadata)
        .context("the model has no usable chat template")?;
    if tpl.is_fallback() {
        info!("the model has no chat template: using ChatML");
    }
    ctrlc::set_handler(|| {
        if GENERATING.load(Ordering::SeqCst) {
            STOP.store(true, Ordering::SeqCst);
        } else {
            eprint!("\n(Ctrl-C stops an answer; /exit or Ctrl-D quits)\n> ");
            let _ = std::io::stderr().flush();
        }
    })
    .context("cannot install the Ctrl-C handler")?;
    let interactive = std::io::stdin().is_terminal();
    info!(
        "chat: /image PATH attaches an image, /reset forgets, /exit quits; Ctrl-C stops an answer"
    );
    let mut messages: Vec<ChatMessage> = Vec::new();
    if let Some(s) = &a.system {
        messages.push(ChatMessage::text("system", s));
    }
    let n_ctx = session.n_ctx();
    let mut stdin = std::io::stdin().lock();
    let stdout = std::io::stdout();
    let mut line = String::new();
    loop {
        if interactive {
            print!("> ");
            std::io::stdout().flush()?;
        }
        line.clear();
        if stdin.read_line(&mut line)? == 0 {
            break;
        }
        let text = match parse_input(&line) {
            Input::Empty => continue,
            Input::Exit => break,
            Input::Reset => {
                messages.truncate(usize::from(a.system.is_some()));
                session.reset();
                eprintln!("(conversation forgotten)");
                continue;
            }
            Input::Image(path) => {
                // decoding first gives the better message for a bad file
                let shown = if path.is_empty() { "(none)" } else { path };
                let limit = ats_vision::preprocess::DecodeLimits::default().max_alloc;
                match ats_core::files::read_bounded(std::path::Path::new(path), limit, "images") {
                    Err(e) => eprintln!("cannot use {shown}: {e}"),
                    Ok(bytes) => match ats_vision::preprocess::decode_image(&bytes) {
                        Err(e) => eprintln!("cannot use {shown}: {e}"),
                        Ok(_) => eprintln!(
                            "cannot attach {shown}: chat was started without --mmproj (a vision projector)"
                        ),
                    },
                }
                continue;
            }
            Input::Unknown(cmd) => {
                eprintln!("unknown command {cmd} (/image PATH, /reset, /exit)");
                continue;
            }
            Input::Message(t) => t.to_string(),
        };
        messages.push(ChatMessage::text("user", text));
        // messages stay plain text: only the template's markup is control tokens
        let prompt = tpl.render_guarded(&messages, true, &tok)?;
        let ids = match tok.encode_guarded(
            &prompt.text,
            prompt.guards,
            true,
            n_ctx.saturating_sub(1),
        ) {
            Err(TokenizerError::TooManyTokens { at_least, .. }) => {
                eprintln!(
                    "(the conversation has at least {at_least} tokens and no longer fits the context of {n_ctx} (-c): /reset starts over)"
                );
                messages.pop();
                continue;
            }
            r => r?,
        };
        tracing::debug!(n_tokens = ids.len(), ?ids, "prompt");
        // feed only what the cache lacks; anything else starts it afresh
        let reuse = session.history().len() < ids.len() && ids.starts_with(session.history());
        if !reuse {
            session.reset();
        }
        let feed = ids[session.history().len()..].to_vec();
        if ids.len() >= n_ctx {
            eprintln!(
                "(the conversation has {} tokens and no longer fits the context of {n_ctx} (-c): /reset starts over)",
                ids.len()
            );
            messages.pop();
            continue;
        }
        let params = GenParams {
            max_tokens: a.n_predict.unwrap_or(usize::MAX),
            sampler: a.sample.config(),
            stop: Vec::new(),
            ignore_eos: a.ignore_eos,
            ..Default::default()
        };
        STOP.store(false, Ordering::SeqCst);
        GENERATING.store(true, Ordering::SeqCst);
        let mut out = stdout.lock();
        let result = session.generate(&feed, &params, &mut |ev| match ev {
            GenEvent::Text(t) => {
                let _ = out.write_all(t.as_bytes()).and_then(|_| out.flush());
                !STOP.load(Ordering::SeqCst)
            }
            GenEvent::Logprobs(_) => true,
        });
        GENERATING.store(false, Ordering::SeqCst);
        let _ = writeln!(out);
        drop(out);
        match result {
            Ok(g) => {
                if g.stop == StopReason::Cancelled {
                    eprintln!("(stopped)");
                } else if g.stop == StopReason::ContextFull {
                    eprintln!("(the context is full: /reset starts over)");
                }
                // keep what was said, even when stopped, so the cache stays the conversation
                messages.push(ChatMessage::text("assistant", g.text));
                if !logging::quiet() {
                    report::print_turn(&g.timings);
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                messages.pop();
                session.reset();
            }
        }
    }
    if !logging::quiet() {
        report::print_memory(session);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_messages() {
        assert_eq!(parse_input("hello there\n"), Input::Message("hello there"));
        assert_eq!(parse_input("  \n"), Input::Empty);
        assert_eq!(parse_input("/exit\n"), Input::Exit);
        assert_eq!(parse_input("/reset"), Input::Reset);
        assert_eq!(parse_input("/image  a b.png \n"), Input::Image("a b.png"));
        assert_eq!(parse_input("/imagine"), Input::Unknown("/imagine"));
    }
}
