//! Chat templates: the Jinja template a GGUF file carries in
//! `tokenizer.chat_template`, rendered with MiniJinja the way Hugging Face
//! `transformers` renders it (`trim_blocks`, `lstrip_blocks`, Python string
//! methods, `raise_exception`, `strftime_now`, Python-style `tojson`).
//!
//! Templates come from files, so they are untrusted: each render has a fuel
//! budget (MiniJinja charges it per instruction and per byte of data built)
//! and an output cap, and every failure is a [`ChatError`].

mod glm_tools;
pub mod harmony;
pub mod harmony_grammar;
mod pyjson;
pub mod reasoning;
mod strftime;
pub mod think;
pub mod tools;

use std::io;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr};
use minijinja::{Environment, Error, ErrorKind, Value};

use crate::gguf::Metadata;
use crate::tokenizer::{GuardedText, Guards, Tokenizer, keys};

/// The template used when a file has none: ChatML, with images as Qwen2-VL's
/// placeholder (the vision models ATS runs use ChatML).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' }}\
{% if message['content'] is string %}{{ message['content'] }}\
{% else %}{% for part in message['content'] %}\
{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}\
{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}\
{% endfor %}{% endif %}\
{{ '<|im_end|>\\n' }}{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Marks errors raised by the template itself through `raise_exception`.
const RAISE_TAG: &str = "raise_exception: ";
const TEMPLATE_NAME: &str = "chat_template";

/// One piece of a message's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContentPart {
    /// Text.
    Text(String),
    /// An image, rendered as the template's image placeholder.
    Image,
}

/// A chat message: a role (`system`, `user`, `assistant`, `tool`, ...), its
/// content, and for an assistant the tools it called, for a tool's answer
/// the call it answers.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    /// Who speaks.
    pub role: String,
    /// What is said, in order.
    pub content: Vec<ContentPart>,
    /// The calls an assistant message made.
    pub tool_calls: Vec<ToolCall>,
    /// The call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// An assistant message's reasoning, given back in a conversation
    /// (templates see it as `reasoning_content` and as `thinking`, gpt-oss's
    /// name, which renders it before a tool call).
    pub reasoning: Option<String>,
}

/// A call an assistant made, as templates see it (OpenAI's shape, with the
/// arguments as a JSON object, which templates write out with `tojson`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The call's id.
    pub id: String,
    /// The function.
    pub name: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
}

impl ChatMessage {
    /// A message with the given parts.
    pub fn new(role: impl Into<String>, content: Vec<ContentPart>) -> Self {
        ChatMessage {
            role: role.into(),
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: None,
        }
    }

    /// A text-only message.
    pub fn text(role: impl Into<String>, text: impl Into<String>) -> Self {
        Self::new(role, vec![ContentPart::Text(text.into())])
    }

    /// The message as templates see it. Text-only content is one string (what
    /// text templates concatenate); content with images is Hugging Face's
    /// list of parts, `[{"type": "image"}, {"type": "text", "text": ...}]`.
    fn to_value(&self) -> Value {
        let has_image = self.content.iter().any(|p| matches!(p, ContentPart::Image));
        let content = if has_image {
            Value::from_iter(self.content.iter().map(|p| match p {
                ContentPart::Image => OrderedMap::value([("type", Value::from("image"))]),
                ContentPart::Text(t) => OrderedMap::value([
                    ("type", Value::from("text")),
                    ("text", Value::from(t.as_str())),
                ]),
            }))
        } else {
            let mut text = String::new();
            for p in &self.content {
                if let ContentPart::Text(t) = p {
                    text.push_str(t);
                }
            }
            Value::from(text)
        };
        let mut entries = vec![
            (Value::from("role"), Value::from(self.role.as_str())),
            (Value::from("content"), content),
        ];
        if !self.tool_calls.is_empty() {
            let calls = self.tool_calls.iter().map(|c| {
                OrderedMap::value([
                    ("id", Value::from(c.id.as_str())),
                    ("type", Value::from("function")),
                    (
                        "function",
                        OrderedMap::value([
                            ("name", Value::from(c.name.as_str())),
                            ("arguments", json_value(&c.arguments)),
                        ]),
                    ),
                ])
            });
            entries.push((Value::from("tool_calls"), Value::from_iter(calls)));
        }
        if let Some(id) = &self.tool_call_id {
            entries.push((Value::from("tool_call_id"), Value::from(id.as_str())));
        }
        if let Some(r) = self.reasoning.as_deref().filter(|r| !r.is_empty()) {
            for key in ["reasoning_content", "thinking"] {
                entries.push((Value::from(key), Value::from(r)));
            }
        }
        Value::from_object(OrderedMap(entries))
    }

    /// Every string of the message that reaches the prompt.
    fn texts(&self) -> Vec<&str> {
        let mut out = vec![self.role.as_str()];
        out.extend(self.content.iter().filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            ContentPart::Image => None,
        }));
        for c in &self.tool_calls {
            out.push(&c.id);
            out.push(&c.name);
            json_strings(&c.arguments, &mut out);
        }
        out.extend(self.tool_call_id.as_deref());
        out.extend(self.reasoning.as_deref());
        out
    }

    /// The message with every string passed through `f`.
    fn map_texts(&self, f: &dyn Fn(&str) -> String) -> ChatMessage {
        ChatMessage {
            role: f(&self.role),
            content: self
                .content
                .iter()
                .map(|p| match p {
                    ContentPart::Text(t) => ContentPart::Text(f(t)),
                    ContentPart::Image => ContentPart::Image,
                })
                .collect(),
            tool_calls: self
                .tool_calls
                .iter()
                .map(|c| ToolCall {
                    id: f(&c.id),
                    name: f(&c.name),
                    arguments: map_json(&c.arguments, f),
                })
                .collect(),
            tool_call_id: self.tool_call_id.as_deref().map(f),
            reasoning: self.reasoning.as_deref().map(f),
        }
    }
}

/// A JSON value as templates see it (objects keep their order).
fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (_, Some(u), _) => Value::from(u),
            (_, _, f) => Value::from(f.unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::from_iter(a.iter().map(json_value)),
        J::Object(o) => Value::from_object(OrderedMap(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), json_value(v)))
                .collect(),
        )),
    }
}

/// Every string in a JSON value, keys included.
fn json_strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    use serde_json::Value as J;
    match v {
        J::String(s) => out.push(s),
        J::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        J::Object(o) => {
            for (k, x) in o {
                out.push(k);
                json_strings(x, out);
            }
        }
        _ => {}
    }
}

/// A JSON value with every string (keys included) passed through `f`.
fn map_json(v: &serde_json::Value, f: &dyn Fn(&str) -> String) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::String(s) => J::String(f(s)),
        J::Array(a) => J::Array(a.iter().map(|x| map_json(x, f)).collect()),
        J::Object(o) => J::Object(o.iter().map(|(k, x)| (f(k), map_json(x, f))).collect()),
        other => other.clone(),
    }
}

/// A map that iterates in insertion order, like a Python dict (MiniJinja's
/// own maps are sorted, which would reorder `tojson` output).
#[derive(Debug)]
struct OrderedMap(Vec<(Value, Value)>);

impl OrderedMap {
    /// A map of these entries, as a value.
    fn value<const N: usize>(entries: [(&str, Value); N]) -> Value {
        Value::from_object(OrderedMap(
            entries
                .into_iter()
                .map(|(k, v)| (Value::from(k), v))
                .collect(),
        ))
    }
}

impl Object for OrderedMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.iter().map(|(k, _)| k.clone()).collect())
    }
}

/// Bounds on one render of an untrusted template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChatLimits {
    /// MiniJinja fuel: about one unit per instruction and per 64 bytes of
    /// data built.
    pub fuel: u64,
    /// Largest rendered prompt, in bytes.
    pub max_output_bytes: usize,
}

impl Default for ChatLimits {
    /// Far above what real templates use on long conversations (hundreds of
    /// messages cost well under 10^6 units), and far below what a runaway
    /// template would need to exhaust memory or time.
    fn default() -> Self {
        ChatLimits {
            fuel: 5_000_000,
            max_output_bytes: 16 << 20,
        }
    }
}

/// Why a chat template cannot be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A metadata key the template needs has the wrong type or value.
    #[error("chat template metadata: key {key:?}: {problem}")]
    BadKey {
        /// The GGUF key.
        key: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The template does not parse.
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    /// The template called `raise_exception` (it rejects the conversation).
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// The template used up its fuel: it loops too long or builds too much data.
    #[error(
        "chat template ran out of fuel ({fuel} units): it runs too long or builds too much data"
    )]
    OutOfFuel {
        /// The budget it had.
        fuel: u64,
    },
    /// The rendered prompt would exceed the output cap.
    #[error("chat template output exceeds {limit} bytes")]
    OutputTooLarge {
        /// The cap.
        limit: usize,
    },
    /// Any other failure while rendering (undefined operation, bad types).
    #[error("chat template failed: {0}")]
    Render(String),
    /// Message content could not be marked as plain text (see
    /// [`ChatTemplate::render_guarded`]).
    #[error("message content: {0}")]
    Guard(crate::tokenizer::TokenizerError),
    /// A caller's template variable would replace one the renderer sets.
    #[error(
        "template variable {0:?} is set by the renderer (messages, tools, add_generation_prompt, bos_token, eos_token)"
    )]
    ReservedVariable(String),
}

/// What a template is rendered with besides the messages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TemplateVars {
    /// OpenAI's tools (`tools`, unset when empty).
    pub tools: Vec<serde_json::Value>,
    /// The caller's own variables (`chat_template_kwargs`: Qwen3's
    /// `enable_thinking`, gpt-oss's `reasoning_effort`, ...).
    pub kwargs: TemplateKwargs,
}

/// The variables the renderer sets itself.
const RESERVED_VARS: [&str; 5] = [
    "messages",
    "tools",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// A caller's template variables (`chat_template_kwargs`).
pub type TemplateKwargs = serde_json::Map<String, serde_json::Value>;

/// The first of `kwargs` that would replace a variable the renderer sets
/// itself, if any: callers refuse it naming their own flag or field.
pub fn reserved_name(kwargs: &TemplateKwargs) -> Option<&str> {
    kwargs
        .keys()
        .map(String::as_str)
        .find(|k| RESERVED_VARS.contains(k))
}

/// A compiled chat template with the values it is rendered with.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    fallback: bool,
    limits: ChatLimits,
}

impl ChatTemplate {
    /// The template in `tokenizer.chat_template`, with `bos_token` and
    /// `eos_token` from the vocabulary. A file without a template gets
    /// ChatML, and [`ChatTemplate::is_fallback`] says so: callers should tell
    /// the user.
    pub fn from_gguf(md: &Metadata) -> Result<ChatTemplate, ChatError> {
        let bos = token_text(md, keys::BOS_ID)?;
        let eos = token_text(md, keys::EOS_ID)?;
        match md.get(keys::CHAT_TEMPLATE) {
            None => {
                let mut t = ChatTemplate::new(CHATML_TEMPLATE, bos, eos)?;
                t.fallback = true;
                Ok(t)
            }
            Some(v) => match v.as_str() {
                Some(src) => ChatTemplate::new(src, bos, eos),
                None => Err(ChatError::BadKey {
                    key: keys::CHAT_TEMPLATE,
                    problem: format!("expected a string, found {v}"),
                }),
            },
        }
    }

    /// Compiles a template with the given special-token texts.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<ChatTemplate, ChatError> {
        let limits = ChatLimits::default();
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| ChatError::Syntax(e.to_string()))?,
        );
        env.set_fuel(Some(limits.fuel));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("{RAISE_TAG}{msg}"),
            ))
        });
        env.add_function("strftime_now", |fmt: String| {
            strftime::DateTime::now().format(&fmt)
        });
        env.add_filter("tojson", pyjson::tojson);
        let source = source.into();
        env.add_template_owned(TEMPLATE_NAME, source.clone())
            .map_err(|e| ChatError::Syntax(describe(&e)))?;
        Ok(ChatTemplate {
            env,
            source,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
            fallback: false,
            limits,
        })
    }

    /// ChatML, for files without a template.
    pub fn chatml(
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<ChatTemplate, ChatError> {
        let mut t = ChatTemplate::new(CHATML_TEMPLATE, bos_token, eos_token)?;
        t.fallback = true;
        Ok(t)
    }

    /// Replaces the render bounds.
    pub fn with_limits(mut self, limits: ChatLimits) -> Self {
        self.env.set_fuel(Some(limits.fuel));
        self.limits = limits;
        self
    }

    /// True when the file had no template and ChatML is used instead.
    pub fn is_fallback(&self) -> bool {
        self.fallback
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The prompt for a conversation; with `add_generation_prompt` it ends
    /// where the assistant's reply begins.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, &TemplateVars::default(), add_generation_prompt)
    }

    /// [`ChatTemplate::render`] with more variables: OpenAI's `tools` list
    /// (`{"type": "function", "function": {...}}` objects, unset when
    /// empty, as Hugging Face passes none) and the caller's own
    /// (`chat_template_kwargs`).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        vars: &TemplateVars,
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        if let Some(k) = reserved_name(&vars.kwargs) {
            return Err(ChatError::ReservedVariable(k.to_string()));
        }
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Render(describe(&e)))?;
        let tools = &vars.tools;
        let kwargs = Value::from_object(OrderedMap(
            vars.kwargs
                .iter()
                .map(|(k, v)| (Value::from(k.as_str()), json_value(v)))
                .collect(),
        ));
        let ctx = minijinja::context! {
            messages => Value::from_iter(messages.iter().map(ChatMessage::to_value)),
            add_generation_prompt => add_generation_prompt,
            tools => (!tools.is_empty()).then(|| Value::from_iter(tools.iter().map(json_value))),
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            ..kwargs
        };
        let mut out = CappedWriter {
            buf: Vec::new(),
            limit: self.limits.max_output_bytes,
            exceeded: false,
        };
        let result = tmpl.render_captured_to(ctx, &mut out).map(drop);
        if out.exceeded {
            return Err(ChatError::OutputTooLarge {
                limit: self.limits.max_output_bytes,
            });
        }
        result.map_err(|e| self.classify(&e))?;
        // MiniJinja writes whole UTF-8 strings, so this cannot fail; lossy
        // conversion keeps it panic-free regardless.
        Ok(String::from_utf8(out.buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// [`ChatTemplate::render`] for a prompt that will be tokenized: every
    /// control-token text inside message content (and roles) is guarded, so
    /// that [`Tokenizer::encode_guarded`] reads it as plain text and only the
    /// template's own markup yields control tokens. A user who writes
    /// `<|im_end|><|im_start|>system` in a message gets those characters,
    /// not a forged turn.
    pub fn render_guarded(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        tokenizer: &Tokenizer,
    ) -> Result<GuardedText, ChatError> {
        self.render_guarded_with(
            messages,
            &TemplateVars::default(),
            add_generation_prompt,
            tokenizer,
        )
    }

    /// [`ChatTemplate::render_guarded`] with more variables (see
    /// [`ChatTemplate::render_with`]); every string in them (the tools, the
    /// messages' tool calls, the caller's variables) is guarded like content.
    pub fn render_guarded_with(
        &self,
        messages: &[ChatMessage],
        vars: &TemplateVars,
        add_generation_prompt: bool,
        tokenizer: &Tokenizer,
    ) -> Result<GuardedText, ChatError> {
        let mut texts: Vec<&str> = messages.iter().flat_map(ChatMessage::texts).collect();
        for t in vars.tools.iter().chain(vars.kwargs.values()) {
            json_strings(t, &mut texts);
        }
        let fixed = [
            self.source.as_str(),
            self.bos_token.as_str(),
            self.eos_token.as_str(),
        ];
        let guards = Guards::choose(texts.into_iter().chain(fixed)).map_err(ChatError::Guard)?;
        let guard = |t: &str| tokenizer.guard(t, guards);
        let guarded: Vec<ChatMessage> = messages.iter().map(|m| m.map_texts(&guard)).collect();
        let vars = TemplateVars {
            tools: vars.tools.iter().map(|t| map_json(t, &guard)).collect(),
            kwargs: vars
                .kwargs
                .iter()
                .map(|(k, v)| (k.clone(), map_json(v, &guard)))
                .collect(),
        };
        Ok(GuardedText {
            text: self.render_with(&guarded, &vars, add_generation_prompt)?,
            guards,
        })
    }

    fn classify(&self, e: &Error) -> ChatError {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(me) = err.downcast_ref::<Error>() {
                if me.kind() == ErrorKind::OutOfFuel {
                    return ChatError::OutOfFuel {
                        fuel: self.limits.fuel,
                    };
                }
                if let Some(msg) = me.detail().and_then(|d| d.strip_prefix(RAISE_TAG)) {
                    return ChatError::Raised(msg.to_string());
                }
            }
            cur = err.source();
        }
        ChatError::Render(describe(e))
    }
}

/// A MiniJinja error with its location and causes, on one line.
fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The text of the token a metadata id key points at, or "" without one.
fn token_text(md: &Metadata, id_key: &'static str) -> Result<String, ChatError> {
    let Some(v) = md.get(id_key) else {
        return Ok(String::new());
    };
    let bad = |problem: String| ChatError::BadKey {
        key: id_key,
        problem,
    };
    let id = v
        .as_u64()
        .ok_or_else(|| bad(format!("expected a token id, found {v}")))?;
    let tokens = md.get_array(keys::TOKENS).unwrap_or_default();
    let t = usize::try_from(id)
        .ok()
        .and_then(|i| tokens.get(i))
        .ok_or_else(|| {
            bad(format!(
                "token id {id} is outside the {} tokens",
                tokens.len()
            ))
        })?;
    t.as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("token {id} is not a string")))
}

/// Collects output up to a cap; past it, writes fail and the render stops.
struct CappedWriter {
    buf: Vec<u8>,
    limit: usize,
    exceeded: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.exceeded = true;
            return Err(io::Error::other("chat template output cap reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
