//! Constrained decoding: grammars (JSON schemas, OpenAI's "any JSON
//! object", Lark grammars that may embed schemas) compiled against the
//! model's vocabulary, and per sequence a [`Constraint`] that masks the
//! logits before sampling and advances with each accepted token.
//!
//! Built on `llguidance` (the constrained-decoding library llama.cpp and
//! mistral.rs use): its Earley parser with a derivative-based lexer computes
//! a token mask in tens of microseconds from a trie of the vocabulary's
//! bytes ([`Grammars::new`] builds that trie from ATS's own tokenizer), and
//! it compiles JSON schemas itself, refusing keywords it cannot enforce
//! rather than ignoring them. `outlines-core` compiles schemas to regular
//! expressions and then to a token-level automaton, which is slow to build
//! for large schemas and cannot express recursive ones.

mod compile;
mod constraint;
mod error;
mod vocab;

pub use compile::{GrammarSpec, Grammars};
pub use constraint::Constraint;
pub use error::GrammarError;

#[cfg(test)]
mod tests;
