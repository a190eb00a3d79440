//! Grammars that keep gpt-oss in its harmony format: an answer may reason
//! first (`analysis` and `commentary` notes, each ended by `<|end|>` and a
//! new `<|start|>assistant`, as the model is trained to), then it must be
//! the message asked for: a call to `functions.NAME` with JSON arguments,
//! or a `final` message holding the JSON a `response_format` asks for.
//! Without the notes the model could not think before it answers; without
//! the headers its answer would not be harmony at all.

use serde_json::{Value, json};

use super::tools::{ToolSpec, compact, literal};
use crate::grammar::GrammarSpec;
use crate::tokenizer::Tokenizer;

/// Harmony's markers as Lark literals: channel, message, end, start,
/// constrain.
fn markers(tok: &Tokenizer) -> [String; 5] {
    [
        "<|channel|>",
        "<|message|>",
        "<|end|>",
        "<|start|>",
        "<|constrain|>",
    ]
    .map(|t| literal(t, tok))
}

/// `start: note* ANSWER` with the notes' rules; `answer` is the answer's own rule.
fn with_notes(answer: &str, tok: &Tokenizer) -> String {
    let [ch, msg, end, start, _] = markers(tok);
    format!(
        "start: note* {answer}\n\
         note: {ch} (\"analysis\" | \"commentary\") {msg} NOTE_TEXT? {end} {start} \"assistant\"\n\
         NOTE_TEXT: /(?s:.+)/\n"
    )
}

/// A call to one of `chosen` (`<|channel|>commentary to=functions.NAME
/// <|constrain|>json<|message|>{..}`) after any notes.
pub fn call(chosen: &[&ToolSpec], tok: &Tokenizer) -> GrammarSpec {
    let [ch, msg, _, _, constrain] = markers(tok);
    let names: Vec<String> = (0..chosen.len()).map(|i| format!("call_{i}")).collect();
    let mut g = with_notes("call", tok);
    g.push_str(&format!("call: {}\n", names.join(" | ")));
    for (i, t) in chosen.iter().enumerate() {
        let open = Value::String(format!("commentary to=functions.{} ", t.name));
        g.push_str(&format!(
            "call_{i}: {ch} {open} {constrain} \"json\" {msg} args_{i}\nargs_{i}: %json {}\n",
            compact(t.parameters.clone())
        ));
    }
    GrammarSpec::Lark(g)
}

/// `spec`'s JSON as a `final` message after any notes; `None` for a
/// grammar that is not a JSON schema (a Lark grammar stays as it is).
pub fn final_json(spec: &GrammarSpec, tok: &Tokenizer) -> Option<GrammarSpec> {
    let schema = match spec {
        GrammarSpec::JsonSchema(s) => s.clone(),
        GrammarSpec::JsonObject => json!({"type": "object"}),
        GrammarSpec::Lark(_) => return None,
    };
    let [ch, msg, ..] = markers(tok);
    let mut g = with_notes("answer", tok);
    g.push_str(&format!(
        "answer: {ch} \"final\" {msg} body\nbody: %json {}\n",
        compact(schema)
    ));
    Some(GrammarSpec::Lark(g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tools::tests::{follows, gpt_oss};
    use crate::grammar::Grammars;

    #[test]
    fn a_json_answer_is_a_final_message_after_any_notes() {
        let (tok, _) = gpt_oss();
        let g = Grammars::new(&tok).unwrap();
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
            "required": ["n"], "additionalProperties": false});
        let spec = final_json(&GrammarSpec::JsonSchema(schema), &tok).unwrap();
        let answer = "<|channel|>final<|message|>{\"n\": 4}";
        assert!(follows(&g, &tok, &spec, answer));
        let thought = "<|channel|>analysis<|message|>Two and two.<|end|><|start|>assistant";
        assert!(follows(&g, &tok, &spec, &format!("{thought}{answer}")));
        // bare JSON, another schema's JSON, or a call are not the answer
        assert!(!follows(&g, &tok, &spec, "{\"n\": 4}"));
        assert!(!follows(
            &g,
            &tok,
            &spec,
            "<|channel|>final<|message|>{\"m\": 4}"
        ));
        let object = final_json(&GrammarSpec::JsonObject, &tok).unwrap();
        assert!(follows(
            &g,
            &tok,
            &object,
            "<|channel|>final<|message|>{\"any\": [1]}"
        ));
        assert!(final_json(&GrammarSpec::Lark("start: \"x\"".into()), &tok).is_none());
    }
}
