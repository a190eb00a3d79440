//! Grammars compiled against one vocabulary.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::Value;

use super::{Constraint, GrammarError, vocab};
use crate::tokenizer::Tokenizer;

/// What an answer must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid against this schema (an object; OpenAI's `json_schema`).
    JsonSchema(Value),
    /// A grammar in llguidance's Lark dialect; `%json { ... }` embeds a
    /// schema (tool calls are written this way).
    Lark(String),
}

/// The grammar compiler of one vocabulary (cheap to clone; build once per model).
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Grammars({} tokens)",
            self.factory.tok_env().tok_trie().vocab_size()
        )
    }
}

impl Grammars {
    /// The compiler for `tok`'s vocabulary.
    pub fn new(tok: &Tokenizer) -> Result<Grammars, GrammarError> {
        let env = vocab::token_env(tok)?;
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Invalid(e.to_string()))?;
        // errors come back as values; nothing is printed
        factory.quiet();
        Ok(Grammars {
            factory: Arc::new(factory),
        })
    }

    /// A fresh constraint for `spec`: an invalid grammar, or a schema with
    /// a keyword that cannot be enforced, is an error naming it.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let grammar = match spec {
            GrammarSpec::JsonObject => schema_grammar(serde_json::json!({"type": "object"}))?,
            GrammarSpec::JsonSchema(s) => schema_grammar(s.clone())?,
            GrammarSpec::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        };
        // a grammar is untrusted input: a panic in the compiler is its error,
        // not the server's
        let parser =
            std::panic::catch_unwind(AssertUnwindSafe(|| self.factory.create_parser(grammar)))
                .map_err(|_| {
                    GrammarError::Invalid("the grammar compiler failed on this grammar".into())
                })?
                .map_err(|e| GrammarError::Invalid(message(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Invalid(message(&e)));
        }
        Ok(Constraint::new(matcher))
    }
}

/// llguidance's error for people: without the backtrace it appends to a
/// panic it caught (which says nothing to the sender of a schema).
fn message(e: &str) -> String {
    let text = e.split("<backtrace>").next().unwrap_or(e).trim();
    match text.strip_prefix("panic: ") {
        Some(p) => format!("the grammar compiler failed on this grammar ({p})"),
        None => text.to_string(),
    }
}

/// A schema's grammar, with JSON written compactly (`", "` and `": "`, no
/// other whitespace): a small model may otherwise fill its answer with
/// blank lines the grammar allows.
fn schema_grammar(mut schema: Value) -> Result<TopLevelGrammar, GrammarError> {
    let Some(obj) = schema.as_object_mut() else {
        return Err(GrammarError::SchemaNotObject(kind(&schema).into()));
    };
    let opts = JsonCompileOptions {
        item_separator: ", ".into(),
        key_separator: ": ".into(),
        whitespace_flexible: false,
        ..JsonCompileOptions::default()
    };
    obj.insert(
        "x-guidance".into(),
        serde_json::to_value(&opts).map_err(|e| GrammarError::Invalid(e.to_string()))?,
    );
    Ok(TopLevelGrammar::from_json_schema(schema))
}

/// A JSON value's kind, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
