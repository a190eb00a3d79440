//! Grammars on real vocabularies: the fixture's byte-level BPE and a
//! SentencePiece one with byte fallback. Answers are walks that take, at
//! each step, the allowed token a seeded random score likes best: whatever
//! the "model" prefers, what comes out parses and matches.

use serde_json::{Value, json};

use super::*;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;

fn fixture() -> Tokenizer {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = root.join("../shared/fixtures/qwen2/qwen2-f32.gguf");
    let f = GgufFile::open(&path).unwrap();
    Tokenizer::from_gguf(&f.metadata).unwrap()
}

fn spm() -> Tokenizer {
    let f = crate::tokenizer::tests::spm_gguf(&[]);
    Tokenizer::from_gguf(&f.metadata).unwrap()
}

/// Scores from a small xorshift generator, one per token.
fn scores(n: usize, state: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            (*state >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// A constrained answer: the best-scored allowed token each step, until an
/// end-of-generation token or the grammar's end; `None` past `limit` tokens.
fn walk(tok: &Tokenizer, c: &mut Constraint, seed: u64, limit: usize) -> Option<String> {
    let mut state = seed | 1;
    let mut ids = Vec::new();
    for _ in 0..limit {
        let mut logits = scores(tok.vocab_size() + 3, &mut state);
        c.mask(&mut logits).unwrap();
        assert!(
            logits[tok.vocab_size()..]
                .iter()
                .all(|l| *l == f32::NEG_INFINITY)
        );
        let id = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap() as u32;
        assert!(logits[id as usize].is_finite(), "the mask allowed nothing");
        c.accept(id).unwrap();
        if tok.is_eog(id) {
            return Some(tok.decode(&ids).unwrap());
        }
        ids.push(id);
        if c.is_finished() {
            return Some(tok.decode(&ids).unwrap());
        }
    }
    None
}

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pet": {"enum": ["cat", "dog"]}
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": false
    })
}

#[test]
fn schema_answers_parse_and_match_on_both_vocabularies() {
    for tok in [fixture(), spm()] {
        let g = Grammars::new(&tok).unwrap();
        for seed in 1..6 {
            let mut c = g.compile(&GrammarSpec::JsonSchema(person())).unwrap();
            let text = walk(&tok, &mut c, seed, 400).expect("the answer ends");
            let v: Value =
                serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            let o = v.as_object().unwrap();
            assert_eq!(o.len(), 3, "{text}");
            assert!(o["name"].as_str().unwrap().chars().count() <= 6, "{text}");
            assert!((0..=120).contains(&o["age"].as_i64().unwrap()), "{text}");
            assert!(
                ["cat", "dog"].contains(&o["pet"].as_str().unwrap()),
                "{text}"
            );
        }
    }
}

#[test]
fn json_object_is_any_object_and_cannot_end_early() {
    let tok = fixture();
    let g = Grammars::new(&tok).unwrap();
    let mut c = g.compile(&GrammarSpec::JsonObject).unwrap();
    // before anything, no end-of-generation token is allowed
    let mut logits = vec![0.0; tok.vocab_size()];
    c.mask(&mut logits).unwrap();
    for &e in tok.eog_ids() {
        assert_eq!(logits[e as usize], f32::NEG_INFINITY);
    }
    assert!(!c.can_end());
    for seed in 1..4 {
        let mut c = g.compile(&GrammarSpec::JsonObject).unwrap();
        if let Some(text) = walk(&tok, &mut c, seed, 300) {
            let v: Value =
                serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert!(v.is_object(), "{text}");
        }
    }
}

#[test]
fn a_token_the_grammar_forbids_is_an_error() {
    let tok = fixture();
    let g = Grammars::new(&tok).unwrap();
    let mut c = g
        .compile(&GrammarSpec::Lark(r#"start: "yes" | "no""#.into()))
        .unwrap();
    let x = tok.encode("x", false, false).unwrap()[0];
    assert!(matches!(c.accept(x), Err(GrammarError::Failed(_))));
    let mut c = g
        .compile(&GrammarSpec::Lark(r#"start: "yes" | "no""#.into()))
        .unwrap();
    let text = walk(&tok, &mut c, 3, 10).unwrap();
    assert!(text == "yes" || text == "no", "{text}");
}

#[test]
fn bad_schemas_and_grammars_are_errors_that_say_why() {
    let tok = fixture();
    let g = Grammars::new(&tok).unwrap();
    let err = |s: GrammarSpec| g.compile(&s).unwrap_err().to_string();
    assert!(err(GrammarSpec::JsonSchema(json!(true))).contains("must be a JSON object"));
    let e = err(GrammarSpec::JsonSchema(json!({"type": "strng"})));
    assert!(e.contains("strng"), "{e}");
    let e = err(GrammarSpec::JsonSchema(
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
    ));
    assert!(e.contains("missing"), "{e}");
    let e = err(GrammarSpec::JsonSchema(
        json!({"type": "integer", "minimum": 5, "maximum": 1}),
    ));
    assert!(!e.is_empty());
    let e = err(GrammarSpec::Lark("start: ( ".into()));
    assert!(!e.is_empty());
    // bounds the compiler overflows on: with overflow checks (the test
    // profile) a panic it catches, without them (`--release`) its own
    // error; either way an error that says so, without the backtrace
    let huge = json!({"type": "integer", "minimum": -1e30, "maximum": 1e30});
    let e = err(GrammarSpec::JsonSchema(huge));
    let caught = e.starts_with("the grammar compiler failed");
    assert!(caught || e.contains("integer range"), "{e}");
    assert!(!e.contains("backtrace"), "{e}");
}
