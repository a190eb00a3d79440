//! `ats-cli chat`: an interactive chat in the terminal with the model's
//! chat template, images too with `--mmproj`. Each turn re-renders the
//! conversation and runs it as one request of the session's scheduler: the
//! KV pool finds the previous turns cached (images included, keyed by their
//! embeddings), so only the new part is computed. Ctrl-C stops the current
//! answer, not the program: a signal handler sets a flag the loop reads
//! between rounds.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use ats_core::chat::reasoning::{Reading, ReasoningFormat};
use ats_core::chat::{ChatMessage, ChatTemplate, ContentPart, TemplateVars};
use ats_core::tokenizer::{Tokenizer, TokenizerError};
use ats_sched::scheduler::{Event, Request, Scheduler, SchedulerConfig};
use ats_sched::session::{GenParams, Generation, Session, StopReason};
use ats_vision::preprocess::DecodeLimits;
use clap::Args;
use tracing::info;

use super::vlm::ImageArgs;
use crate::args::{ModelArgs, SampleArgs, TemplateArgs};
use crate::usage::usage_bail;
use crate::vision::{ImageError, ImageInput, VisionFront};
use crate::{load, logging, report};

const EXAMPLES: &str = "Examples:
  ats-cli chat -m SmolLM2-135M-Instruct.Q4_1.gguf
  ats-cli chat -m model.gguf --vram 2G --system \"You are terse.\" --temp 0.7
  ats-cli chat -m qwen2-vl.gguf --mmproj mmproj.gguf --image scene.png

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
    #[command(flatten)]
    image: ImageArgs,
    #[command(flatten)]
    template: TemplateArgs,
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
    let n_ctx = session.n_ctx();
    let vision = open_vision(&a.image, session, n_ctx)?;
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
    let vars = TemplateVars {
        tools: Vec::new(),
        kwargs: a.template.kwargs(),
    };
    let mut convo = Conversation::new(a.system.as_deref(), vars);
    for path in &a.image.images {
        convo.attach(vision.as_ref(), &path.display().to_string());
    }
    let mut sched = Scheduler::new(SchedulerConfig::default());
    let mut stdin = std::io::stdin().lock();
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
                convo.reset();
                eprintln!("(conversation forgotten)");
                continue;
            }
            Input::Image(path) => {
                convo.attach(vision.as_ref(), path);
                continue;
            }
            Input::Unknown(cmd) => {
                eprintln!("unknown command {cmd} (/image PATH, /reset, /exit)");
                continue;
            }
            Input::Message(t) => t.to_string(),
        };
        convo.say(text);
        let (request, reading) =
            match convo.request(session, vision.as_ref(), &tpl, &tok, &params(&a)) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("({e})");
                    convo.unsay();
                    continue;
                }
            };
        match answer(&mut sched, session, request, reading) {
            Ok((text, g)) => {
                if g.stop == StopReason::Cancelled {
                    eprintln!("(stopped)");
                } else if g.stop == StopReason::ContextFull {
                    eprintln!("(the context is full: /reset starts over)");
                }
                if !logging::quiet() {
                    report::print_turn(&g.timings);
                }
                // keep what was said, even when stopped, so the next turn
                // starts with what the cache holds
                convo.reply(text);
            }
            Err(e) => {
                eprintln!("error: {e}");
                convo.unsay();
            }
        }
    }
    if !logging::quiet() {
        report::print_memory(session);
    }
    Ok(())
}

/// The generation settings of every answer.
fn params(a: &ChatArgs) -> GenParams {
    GenParams {
        max_tokens: a.n_predict.unwrap_or(usize::MAX),
        sampler: a.sample.config(),
        stop: Vec::new(),
        ignore_eos: a.ignore_eos,
        ..Default::default()
    }
}

/// The projector, with `--mmproj`.
fn open_vision(image: &ImageArgs, session: &Session, n_ctx: usize) -> Result<Option<VisionFront>> {
    let Some(mmproj) = image.mmproj()? else {
        return Ok(None);
    };
    let front = VisionFront::open(
        session.spec().clone(),
        mmproj,
        image.min_pixels,
        image.max_pixels,
        n_ctx.saturating_sub(1).max(1),
        IMAGE_CACHE_BYTES,
    )
    .with_context(|| format!("cannot use the projector {}", mmproj.display()))?;
    Ok(Some(front))
}

/// Image embeddings a chat keeps (the conversation's images are encoded once).
const IMAGE_CACHE_BYTES: usize = 256 << 20;

/// Runs `request` to its end, printing its text as it comes (its
/// reasoning on standard error, as `reading` finds it); Ctrl-C stops it.
/// Returns the text the conversation keeps (the content, without the
/// reasoning) and the generation.
fn answer(
    sched: &mut Scheduler,
    session: &mut Session,
    request: Request,
    reading: Reading,
) -> Result<(String, Generation)> {
    STOP.store(false, Ordering::SeqCst);
    GENERATING.store(true, Ordering::SeqCst);
    let id = sched.submit(request);
    let mut shown = crate::answer::Answer::new().reasoning_apart(reading.splitter());
    let mut text = String::new();
    let mut outcome = None;
    while outcome.is_none() {
        let events = if STOP.load(Ordering::SeqCst) {
            sched.stop(id, session)
        } else {
            sched.step(session)
        };
        for ev in events {
            match ev {
                Event::Text { text: t, .. } => {
                    shown.write(&t);
                    text.push_str(&t);
                }
                Event::Done { generation, .. } => outcome = Some(Ok(generation)),
                Event::Failed { error, .. } => outcome = Some(Err(error)),
                Event::Logprobs { .. } => {}
            }
        }
    }
    GENERATING.store(false, Ordering::SeqCst);
    shown.finish()?;
    // stopped: the text shown so far is what was said
    let said = match &outcome {
        Some(Ok(g)) if g.stop != StopReason::Cancelled => g.text.clone(),
        _ => text,
    };
    // earlier turns keep only their content (harmony's final channel, the
    // text after a <think> block), as the templates render them
    let said = reading.split(&said).1;
    match outcome {
        Some(Ok(g)) => Ok((said, g)),
        Some(Err(e)) => anyhow::bail!(e),
        None => anyhow::bail!("the request ended without an answer"),
    }
}

/// The messages so far and the images they hold (in order), and images
/// attached for the next message.
struct Conversation {
    messages: Vec<ChatMessage>,
    images: Vec<ImageInput>,
    pending: Vec<ImageInput>,
    /// Messages a reset keeps (the system message).
    keep: usize,
    /// The template's variables (`--chat-template-kwargs`).
    vars: TemplateVars,
}

impl Conversation {
    fn new(system: Option<&str>, vars: TemplateVars) -> Conversation {
        let messages: Vec<ChatMessage> = system
            .map(|s| ChatMessage::text("system", s))
            .into_iter()
            .collect();
        Conversation {
            vars,
            keep: messages.len(),
            messages,
            images: Vec::new(),
            pending: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.messages.truncate(self.keep);
        self.images.clear();
        self.pending.clear();
    }

    /// Attaches the image at `path` to the next message (a line on stderr
    /// says why not, when it cannot be).
    fn attach(&mut self, vision: Option<&VisionFront>, path: &str) {
        let shown = if path.is_empty() { "(none)" } else { path };
        let limit = DecodeLimits::default().max_alloc;
        match (
            ats_core::files::read_bounded(Path::new(path), limit, "images"),
            vision,
        ) {
            (Err(e), _) => eprintln!("cannot use {shown}: {e}"),
            (Ok(bytes), None) => match ats_vision::preprocess::decode_image(&bytes) {
                Err(e) => eprintln!("cannot use {shown}: {e}"),
                Ok(_) => eprintln!(
                    "cannot attach {shown}: chat was started without --mmproj (a vision projector)"
                ),
            },
            (Ok(bytes), Some(_)) => {
                self.pending.push(ImageInput {
                    bytes,
                    low_detail: false,
                });
                eprintln!("(image {shown} attached to the next message)");
            }
        }
    }

    /// The user says `text` (after the images attached to it).
    fn say(&mut self, text: String) {
        let mut parts: Vec<ContentPart> = self.pending.iter().map(|_| ContentPart::Image).collect();
        parts.push(ContentPart::Text(text));
        self.images.append(&mut self.pending);
        self.messages.push(ChatMessage::new("user", parts));
    }

    /// Takes back the last user message (it could not be answered).
    fn unsay(&mut self) {
        if let Some(m) = self.messages.pop() {
            let n = m
                .content
                .iter()
                .filter(|p| matches!(p, ContentPart::Image))
                .count();
            let kept = self.images.len() - n;
            self.pending = self.images.split_off(kept);
        }
    }

    fn reply(&mut self, text: String) {
        self.messages.push(ChatMessage::text("assistant", text));
    }

    /// The request for an answer to the conversation: its prompt (images
    /// encoded), which the KV pool finds mostly cached from the last turn.
    fn request(
        &self,
        session: &Session,
        vision: Option<&VisionFront>,
        tpl: &ChatTemplate,
        tok: &Tokenizer,
        params: &GenParams,
    ) -> Result<(Request, Reading)> {
        let n_ctx = session.n_ctx();
        let format = ReasoningFormat::of(tok, Some(tpl));
        let too_long = |n: usize| {
            anyhow::anyhow!(
                "the conversation has at least {n} tokens and no longer fits the context of {n_ctx} (-c): /reset starts over"
            )
        };
        if let Some(v) = vision.filter(|_| !self.images.is_empty()) {
            let prompt = match v.prompt(&self.messages, &self.vars, &self.images, n_ctx - 1) {
                Err(ImageError::TooLong { tokens, .. }) => return Err(too_long(tokens)),
                r => r?,
            };
            let input = v.input(session.machine(), prompt)?;
            let request = Request {
                prompt: input.ids,
                embeds: Some(input.embeds),
                params: params.clone(),
            };
            return Ok((request, Reading::of(format, "")));
        }
        // messages stay plain text: only the template's markup is control tokens
        let prompt = tpl.render_guarded_with(&self.messages, &self.vars, true, tok)?;
        let ids = match tok.encode_guarded(&prompt.text, prompt.guards, true, n_ctx - 1) {
            Err(TokenizerError::TooManyTokens { at_least, .. }) => return Err(too_long(at_least)),
            r => r?,
        };
        tracing::debug!(n_tokens = ids.len(), ?ids, "prompt");
        let reading = Reading::of(format, &prompt.text);
        Ok((Request::text(ids, params.clone()), reading))
    }
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
