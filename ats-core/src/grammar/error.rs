//! Errors of grammars and constraints.

/// Why a grammar cannot be compiled or a constraint cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    /// The vocabulary has no end-of-generation token, so no grammar could end.
    #[error("the vocabulary has no end-of-generation token to end a constrained answer with")]
    NoEndToken,
    /// A JSON schema that is not an object (`true`/`false` are not served).
    #[error("the JSON schema must be a JSON object, not {0}")]
    SchemaNotObject(String),
    /// The grammar or schema is invalid or uses what cannot be enforced.
    #[error("{0}")]
    Invalid(String),
    /// The constraint failed while generating (a token it forbids, a
    /// parser limit reached).
    #[error("constrained decoding failed: {0}")]
    Failed(String),
}
