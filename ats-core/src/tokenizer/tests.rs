//! Tokenizers built from hand-made metadata: a tiny byte-level BPE, a tiny
//! SentencePiece vocabulary written through the GGUF writer, and hostile
//! metadata that must fail with an error naming the key.

use std::collections::HashMap;

use proptest::prelude::*;

use super::byte_level::encode_bytes;
use super::*;
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};

// ---------------------------------------------------------------- gpt2 ---

/// A byte-level vocabulary: the 256 byte tokens, then merged tokens, then
/// `<|end|>` (control) and `<tool>` (user-defined).
fn gpt2_entries() -> Vec<(String, Value)> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| encode_bytes(&[b])).collect();
    let merges = ["Ġ t", "h e", "Ġt he", "i s", "Ġ is"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.push("<|end|>".into());
    tokens.push("<tool>".into());
    let mut types = vec![1i32; tokens.len()];
    let n = types.len();
    types[n - 2] = 3;
    types[n - 1] = 4;
    vec![
        (keys::MODEL.into(), Value::str("gpt2")),
        (keys::PRE.into(), Value::str("gpt-2")),
        (keys::TOKENS.into(), Value::strings(&tokens)),
        (keys::TOKEN_TYPE.into(), Value::i32s(types)),
        (keys::MERGES.into(), Value::strings(merges)),
        (keys::EOS_ID.into(), Value::U32(n as u32 - 2)),
    ]
}

fn metadata(entries: &[(String, Value)]) -> Metadata {
    let mut md = Metadata::default();
    for (k, v) in entries {
        md.insert(k.clone(), v.clone());
    }
    md
}

/// The entries with `key` replaced (or removed when `value` is None).
fn with(entries: &[(String, Value)], key: &str, value: Option<Value>) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = entries.iter().filter(|(k, _)| k != key).cloned().collect();
    if let Some(v) = value {
        out.push((key.to_string(), v));
    }
    out
}

fn gpt2() -> Tokenizer {
    Tokenizer::from_gguf(&metadata(&gpt2_entries())).unwrap()
}

#[test]
fn gpt2_merges_and_special_tokens() {
    let t = gpt2();
    let id = |s: &str| t.token_id(s).unwrap();
    assert_eq!(t.vocab_size(), 263);
    assert_eq!(
        t.model(),
        TokenizerModel::Gpt2 {
            pre: PreTokenizerKind::Gpt2
        }
    );
    // " the" -> "Ġthe" through Ġ+t, h+e, Ġt+he; " is" -> Ġis.
    assert_eq!(
        t.encode(" the is", false, false).unwrap(),
        vec![id("Ġthe"), id("Ġis")]
    );
    // "this" is one word: t, h+i? no merge "h i": t h is.
    assert_eq!(
        t.encode("this", false, false).unwrap(),
        vec![id("t"), id("h"), id("is")]
    );
    // Control tokens only when asked; user-defined tokens always.
    let end = id("<|end|>");
    let tool = id("<tool>");
    assert_eq!(
        t.encode("is<|end|>", false, true).unwrap(),
        vec![id("is"), end]
    );
    let plain = t.encode("is<|end|>", false, false).unwrap();
    assert!(!plain.contains(&end));
    assert_eq!(t.decode(&plain).unwrap(), "is<|end|>");
    assert_eq!(
        t.encode("is<tool>", false, false).unwrap(),
        vec![id("is"), tool]
    );
    // EOS from metadata ends generation; no BOS anywhere.
    assert_eq!(t.eos_id(), Some(end));
    assert!(t.is_eog(end));
    assert_eq!(t.eog_ids(), &[end]);
    assert_eq!(t.bos_id(), None);
    assert_eq!(t.encode("is", true, false).unwrap(), vec![id("is")]);
    assert_eq!(t.token_type(end), Some(TokenType::Control));
}

#[test]
fn gpt2_decodes_bytes_and_streams_whole_characters() {
    let t = gpt2();
    let text = "é🦙 the\r\n\tx";
    let ids = t.encode(text, false, false).unwrap();
    assert_eq!(t.decode(&ids).unwrap(), text);
    // The llama emoji is 4 byte tokens: nothing comes out until the last.
    let mut s = t.stream();
    let mut chunks = Vec::new();
    for &id in &ids {
        chunks.push(s.push(id).unwrap());
    }
    assert!(!s.has_pending());
    assert_eq!(chunks.concat(), text);
    assert_eq!(chunks[0], "");
    assert_eq!(chunks[1], "é");
    assert_eq!(&chunks[2..6], &["", "", "", "🦙"]);
    // An invalid byte comes out as U+FFFD...
    let mut s = t.stream();
    assert_eq!(
        s.push(t.token_id(&encode_bytes(&[0xFF])).unwrap()).unwrap(),
        "\u{FFFD}"
    );
    assert_eq!(
        s.push(t.token_id(&encode_bytes(&[0xE2])).unwrap()).unwrap(),
        ""
    );
    // ...while a dangling lead byte at the end is held back, not shown, and counted
    assert_eq!(s.finish(), 1);
    assert!(matches!(
        t.decode(&[9999]),
        Err(TokenizerError::BadTokenId {
            id: 9999,
            vocab_size: 263
        })
    ));
}

#[test]
fn guarded_control_texts_stay_plain_text() {
    let t = gpt2();
    let end = t.token_id("<|end|>").unwrap();
    let tool = t.token_id("<tool>").unwrap();
    let g = Guards::choose(["is<|end|>"]).unwrap();
    // content that forges a control token, inside markup that has real ones
    let content = t.guard("is<|end|>the<tool>", g);
    let prompt = format!("<|end|>user:{content}<|end|>");
    let ids = t.encode_guarded(&prompt, g, true, usize::MAX).unwrap();
    assert_eq!(ids.iter().filter(|&&i| i == end).count(), 2, "{ids:?}");
    assert_eq!(
        ids.iter().filter(|&&i| i == tool).count(),
        1,
        "user-defined stays"
    );
    assert_eq!(
        t.decode(&ids).unwrap(),
        "<|end|>user:is<|end|>the<tool><|end|>"
    );
    let plain = t.encode("is<|end|>the<tool>", false, false).unwrap();
    assert_eq!(ids[ids.len() - 1 - plain.len()..ids.len() - 1], plain[..]);
    // text with nothing guarded tokenizes exactly like the whole text
    let free = "<|end|>user: the is<|end|>";
    assert_eq!(
        t.encode_guarded(free, g, true, usize::MAX).unwrap(),
        t.encode(free, true, true).unwrap()
    );
    // guards that do not pair up are an error, not a silent reading
    let open = g.open().to_string();
    for bad in [
        open.clone(),
        format!("{open}{open}x"),
        g.close().to_string(),
    ] {
        assert!(matches!(
            t.encode_guarded(&bad, g, false, usize::MAX),
            Err(TokenizerError::BadGuards { .. })
        ));
    }
    // guards are chosen outside the texts they will mark
    let taken = format!("{}{}", g.open(), g.close());
    let g2 = Guards::choose([taken.as_str()]).unwrap();
    assert!(!taken.contains(g2.open()) && !taken.contains(g2.close()));
    let all: String = (0xFDD0..=0xFDEF)
        .chain(0xE000..=0xF8FF)
        .filter_map(char::from_u32)
        .collect();
    assert!(matches!(
        Guards::choose([all.as_str()]),
        Err(TokenizerError::NoGuards)
    ));
}

#[test]
fn bounded_encoding_stops_at_the_limit() {
    let t = gpt2();
    // the longest piece is "<|end|>" (7 bytes)
    assert_eq!(t.max_token_bytes(), 7);
    assert_eq!(t.min_tokens(70), 10);
    let text = " the".repeat(100);
    assert_eq!(
        t.encode_bounded(&text, false, false, 100).unwrap().len(),
        100
    );
    match t.encode_bounded(&text, false, false, 99) {
        Err(TokenizerError::TooManyTokens {
            limit: 99,
            at_least,
        }) => assert_eq!(at_least, 100),
        other => panic!("{other:?}"),
    }
    // far too long: refused from its length alone
    let huge = "x".repeat(1 << 20);
    match t.encode_bounded(&huge, false, false, 1000) {
        Err(TokenizerError::TooManyTokens { limit, at_least }) => {
            assert_eq!((limit, at_least), (1000, (1 << 20) / 7 + 1));
        }
        other => panic!("{other:?}"),
    }
    let g = Guards::choose([huge.as_str()]).unwrap();
    assert!(matches!(
        t.encode_guarded(&huge, g, false, 1000),
        Err(TokenizerError::TooManyTokens { .. })
    ));
}

#[test]
fn gpt2_missing_byte_token_is_an_error_not_a_gap() {
    // Drop the token for byte 'z' (and a merge-free vocab stays valid).
    let mut e = gpt2_entries();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| encode_bytes(&[b])).collect();
    tokens[b'z' as usize] = "<unused>".into();
    e = with(&e, keys::TOKENS, Some(Value::strings(tokens)));
    e = with(&e, keys::TOKEN_TYPE, None);
    e = with(&e, keys::MERGES, Some(Value::strings(Vec::<String>::new())));
    e = with(&e, keys::EOS_ID, None);
    let t = Tokenizer::from_gguf(&metadata(&e)).unwrap();
    assert!(t.encode("abc", false, false).is_ok());
    match t.encode("a zoo", false, false) {
        Err(TokenizerError::Unrepresentable { snippet }) => assert_eq!(snippet, " zoo"),
        other => panic!("expected Unrepresentable, got {other:?}"),
    }
}

#[test]
fn pre_tokenizer_names() {
    let e = gpt2_entries();
    for (name, kind) in [
        ("default", PreTokenizerKind::Default),
        ("gpt-2", PreTokenizerKind::Gpt2),
        ("smollm", PreTokenizerKind::SmolLm),
        ("qwen2", PreTokenizerKind::Qwen2),
        ("llama-bpe", PreTokenizerKind::Llama3),
        ("glm4", PreTokenizerKind::Llama3),
        ("chatglm-bpe", PreTokenizerKind::Llama3),
    ] {
        let md = metadata(&with(&e, keys::PRE, Some(Value::str(name))));
        // llama-bpe adds BOS by default, which this vocabulary lacks.
        let md = if name == "llama-bpe" {
            let mut e2 = with(&e, keys::PRE, Some(Value::str(name)));
            e2.push((keys::ADD_BOS.into(), Value::Bool(false)));
            metadata(&e2)
        } else {
            md
        };
        let t = Tokenizer::from_gguf(&md).unwrap();
        assert_eq!(t.model(), TokenizerModel::Gpt2 { pre: kind }, "{name}");
        assert!(t.notes().is_empty());
    }
    // Absent: llama.cpp's default, and a note saying so.
    let t = Tokenizer::from_gguf(&metadata(&with(&e, keys::PRE, None))).unwrap();
    assert_eq!(
        t.model(),
        TokenizerModel::Gpt2 {
            pre: PreTokenizerKind::Default
        }
    );
    assert_eq!(t.notes().len(), 1);
    assert!(t.notes()[0].contains(keys::PRE));
    // llama-bpe without add_bos_token wants BOS, and there is none.
    let md = metadata(&with(&e, keys::PRE, Some(Value::str("llama-bpe"))));
    assert!(matches!(
        Tokenizer::from_gguf(&md),
        Err(TokenizerError::BadKey {
            key: keys::ADD_BOS,
            ..
        })
    ));
}

#[test]
fn each_pre_tokenizer_is_compiled_once_and_shared() {
    use PreTokenizerKind::*;
    let kinds = [Default, Gpt2, SmolLm, Qwen2, Llama3, Gpt4o];
    let first: Vec<_> = kinds.iter().map(|k| k.shared().unwrap()).collect();
    for (k, a) in kinds.iter().zip(&first) {
        assert!(std::sync::Arc::ptr_eq(a, &k.shared().unwrap()), "{k:?}");
    }
    // one compiled chain per kind, none handed to another kind
    for (i, a) in first.iter().enumerate() {
        for b in &first[i + 1..] {
            assert!(!std::sync::Arc::ptr_eq(a, b));
        }
    }
}

/// Words each pre-tokenizer cuts a text into, as byte-level strings.
fn words(kind: PreTokenizerKind, text: &str) -> Vec<String> {
    let pre = kind.shared().unwrap();
    let mut pts = PreTokenizedString::from(text);
    pre.pre_tokenize(&mut pts).unwrap();
    pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(w, _, _)| String::from_utf8(byte_level::decode_token(w)).unwrap())
        .collect()
}

#[test]
fn pre_tokenizer_splits() {
    let text = "I'VE 12345 apples!!\n\n  ok";
    assert_eq!(
        words(PreTokenizerKind::Gpt2, text),
        ["I", "'", "VE", " 12345", " apples", "!!", "\n\n ", " ok"]
    );
    assert_eq!(
        words(PreTokenizerKind::SmolLm, text),
        [
            "I", "'", "VE", " ", "1", "2", "3", "4", "5", " apples", "!!", "\n\n ", " ok"
        ]
    );
    assert_eq!(
        words(PreTokenizerKind::Qwen2, text),
        [
            "I", "'VE", " ", "1", "2", "3", "4", "5", " apples", "!!\n\n", " ", " ok"
        ]
    );
    assert_eq!(
        words(PreTokenizerKind::Llama3, text),
        [
            "I", "'VE", " ", "123", "45", " apples", "!!\n\n", " ", " ok"
        ]
    );
}

// --------------------------------------------------------------- llama ---

/// A SentencePiece vocabulary: <unk>, <s>, </s>, 256 byte tokens, then text
/// pieces with scores chosen so that merge order matters.
fn spm_pieces() -> Vec<(&'static str, f32)> {
    vec![
        ("▁", -1.0),
        ("h", -1.0),
        ("e", -1.0),
        ("l", -1.0),
        ("o", -1.0),
        ("he", -2.0),
        ("▁h", -3.0),
        ("ll", -4.0),
        ("llo", -5.0),
        ("hello", -6.0),
        ("▁he", -7.0),
        ("lo", -1.5),
        ("el", -8.0),
        ("▁w", -9.0),
        ("w", -1.0),
    ]
}

/// A SentencePiece GGUF (no tensors) of [`spm_pieces`], with `extra` keys.
pub(crate) fn spm_gguf(extra: &[(&str, Value)]) -> GgufFile {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    for (p, s) in spm_pieces() {
        tokens.push(p.into());
        types.push(1);
        scores.push(s);
    }
    let mut w = GgufWriter::new();
    w.kv("general.architecture", Value::str("llama"))
        .kv(keys::MODEL, Value::str("llama"))
        .kv(keys::TOKENS, Value::strings(&tokens))
        .kv(keys::TOKEN_TYPE, Value::i32s(types))
        .kv(keys::SCORES, Value::f32s(scores));
    for (k, v) in extra {
        w.kv(*k, v.clone());
    }
    GgufFile::from_bytes(w.to_bytes(&[]).unwrap()).unwrap()
}

/// llama.cpp's SentencePiece merge rule written out directly: repeatedly
/// merge the adjacent pair whose concatenation is a token with the highest
/// score (leftmost on ties); leftover characters become byte tokens.
fn reference_spm(t: &Tokenizer, scores: &HashMap<String, f32>, text: &str) -> Vec<u32> {
    let mut syms: Vec<String> = text.chars().map(String::from).collect();
    loop {
        let mut best: Option<(f32, usize)> = None;
        for i in 0..syms.len().saturating_sub(1) {
            let cat = format!("{}{}", syms[i], syms[i + 1]);
            if let Some(&s) = scores.get(&cat)
                && best.is_none_or(|(bs, _)| s > bs)
            {
                best = Some((s, i));
            }
        }
        let Some((_, i)) = best else { break };
        let right = syms.remove(i + 1);
        syms[i].push_str(&right);
    }
    let mut ids = Vec::new();
    for s in syms {
        match t
            .token_id(&s)
            .filter(|&id| t.token_type(id) == Some(TokenType::Normal))
        {
            Some(id) => ids.push(id),
            None => ids.extend(
                s.bytes()
                    .map(|b| t.token_id(&format!("<0x{b:02X}>")).unwrap()),
            ),
        }
    }
    ids
}

#[test]
fn spm_merges_follow_scores() {
    let f = spm_gguf(&[]);
    let t = Tokenizer::from_gguf(&f.metadata).unwrap();
    let id = |s: &str| t.token_id(s).unwrap();
    assert_eq!(t.model(), TokenizerModel::Llama);
    assert_eq!(t.vocab_size(), 3 + 256 + spm_pieces().len());
    // SentencePiece conventions when the file names no ids.
    assert_eq!(
        (t.unk_id(), t.bos_id(), t.eos_id()),
        (Some(0), Some(1), Some(2))
    );
    assert!(t.add_bos());
    assert!(t.is_eog(2));
    // "▁hello": lo (-1.5) first, then he (-2), llo (-5), hello (-6); ▁hello is no token.
    assert_eq!(
        t.encode("hello", false, false).unwrap(),
        vec![id("▁"), id("hello")]
    );
    assert_eq!(
        t.encode("hello", true, false).unwrap(),
        vec![1, id("▁"), id("hello")]
    );
    // Spaces become ▁: "▁he" wins over "▁h" + "e"? he (-2) merges first, then ▁he (-7).
    assert_eq!(t.encode("he", false, false).unwrap(), vec![id("▁he")]);
    assert_eq!(t.decode(&[id("▁"), id("hello")]).unwrap(), "hello");
    assert_eq!(t.decode(&[1, id("▁"), id("hello")]).unwrap(), "<s> hello");
}

#[test]
fn spm_byte_fallback_and_special_tokens() {
    let f = spm_gguf(&[]);
    let t = Tokenizer::from_gguf(&f.metadata).unwrap();
    let id = |s: &str| t.token_id(s).unwrap();
    // 'x' and '€' have no piece: their UTF-8 bytes as <0xNN> tokens.
    let ids = t.encode("he€x", false, false).unwrap();
    assert_eq!(
        ids,
        vec![
            id("▁he"),
            id("<0xE2>"),
            id("<0x82>"),
            id("<0xAC>"),
            id("<0x78>")
        ]
    );
    assert_eq!(t.decode(&ids).unwrap(), "he€x");
    assert_eq!(t.token_to_piece(id("<0xE2>")).unwrap(), &[0xE2]);
    let mut s = t.stream();
    let out: Vec<String> = ids.iter().map(|&i| s.push(i).unwrap()).collect();
    assert_eq!(out, [" he", "", "", "€", "x"]);
    // Control text: a leading space again after the special token.
    assert_eq!(
        t.encode("hello</s>hello", false, true).unwrap(),
        vec![id("▁"), id("hello"), 2, id("▁"), id("hello")]
    );
    // Without parse_special the text "</s>" is spelt out.
    let plain = t.encode("</s>", false, false).unwrap();
    assert!(!plain.contains(&2));
    assert_eq!(t.decode(&plain).unwrap(), "</s>");
    // Guarded, it is spelt out too, with the same leading space as plain text.
    let g = Guards::choose(["hello</s>hello"]).unwrap();
    let guarded = t.guard("hello</s>hello", g);
    assert_eq!(
        t.encode_guarded(&guarded, g, false, usize::MAX).unwrap(),
        t.encode("hello</s>hello", false, false).unwrap()
    );
}

#[test]
fn spm_matches_reference_merge_rule() {
    let f = spm_gguf(&[(keys::ADD_SPACE_PREFIX, Value::Bool(false))]);
    let t = Tokenizer::from_gguf(&f.metadata).unwrap();
    let scores: HashMap<String, f32> = spm_pieces()
        .into_iter()
        .map(|(p, s)| (p.to_string(), s))
        .collect();
    for text in [
        "hello",
        "hellohello",
        "lllo",
        "hehehe",
        "o w he",
        "hollow hell",
        "wheel",
        "ll ll",
        "€lo",
        "",
    ] {
        let escaped = text.replace(' ', "▁");
        let ids = t.encode(text, false, false).unwrap();
        assert_eq!(ids, reference_spm(&t, &scores, &escaped), "{text:?}");
        assert_eq!(t.decode(&ids).unwrap(), text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random strings over the pieces' letters, spaces and a few others
    /// tokenize as the reference rule says and round-trip.
    #[test]
    fn spm_random_text(text in "[helow ŀ€x]{0,24}") {
        let f = spm_gguf(&[(keys::ADD_SPACE_PREFIX, Value::Bool(false))]);
        let t = Tokenizer::from_gguf(&f.metadata).unwrap();
        let scores: HashMap<String, f32> =
            spm_pieces().into_iter().map(|(p, s)| (p.to_string(), s)).collect();
        let ids = t.encode(&text, false, false).unwrap();
        prop_assert_eq!(&ids, &reference_spm(&t, &scores, &text.replace(' ', "▁")));
        prop_assert_eq!(t.decode(&ids).unwrap(), text);
    }

    /// Arbitrary metadata values in the tokenizer keys never panic.
    #[test]
    fn hostile_values_never_panic(
        key in prop::sample::select(vec![
            keys::MODEL, keys::PRE, keys::TOKENS, keys::TOKEN_TYPE, keys::MERGES,
            keys::SCORES, keys::BOS_ID, keys::EOS_ID, keys::ADD_BOS, keys::EOT_ID,
        ]),
        value in prop_oneof![
            any::<i64>().prop_map(Value::I64),
            any::<u32>().prop_map(Value::U32),
            any::<bool>().prop_map(Value::Bool),
            "[a-zĠ <|>]{0,8}".prop_map(Value::String),
            prop::collection::vec("[a-zĠ ]{0,4}", 0..6).prop_map(Value::strings),
            prop::collection::vec(-3i32..9, 0..300).prop_map(Value::i32s),
            prop::collection::vec(any::<f32>(), 0..300).prop_map(Value::f32s),
        ],
        text in "\\PC{0,16}",
    ) {
        for base in [gpt2_entries(), spm_entries()] {
            let md = metadata(&with(&base, key, Some(value.clone())));
            if let Ok(t) = Tokenizer::from_gguf(&md)
                && let Ok(ids) = t.encode(&text, true, true)
            {
                let _ = t.decode(&ids);
            }
        }
    }
}

fn spm_entries() -> Vec<(String, Value)> {
    spm_gguf(&[])
        .metadata
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

// ------------------------------------------------------------- hostile ---

/// Asserts that building fails with an error naming `key`.
fn fails_on(entries: &[(String, Value)], key: &str) -> TokenizerError {
    let err = Tokenizer::from_gguf(&metadata(entries)).unwrap_err();
    let named = match &err {
        TokenizerError::MissingKey { key: k } | TokenizerError::BadKey { key: k, .. } => *k,
        TokenizerError::UnknownPreTokenizer(_) => keys::PRE,
        TokenizerError::UnsupportedModel(_) => keys::MODEL,
        other => panic!("unexpected error {other}"),
    };
    assert_eq!(named, key, "{err}");
    assert!(err.to_string().contains(key), "{err}");
    err
}

#[test]
fn hostile_metadata_names_the_key() {
    let g = gpt2_entries();
    let s = spm_entries();
    let n = 263u32;
    fails_on(&with(&g, keys::MODEL, None), keys::MODEL);
    fails_on(&with(&g, keys::MODEL, Some(Value::str("t5"))), keys::MODEL);
    fails_on(&with(&g, keys::MODEL, Some(Value::U32(1))), keys::MODEL);
    fails_on(&with(&g, keys::TOKENS, None), keys::TOKENS);
    fails_on(
        &with(&g, keys::TOKENS, Some(Value::strings(Vec::<String>::new()))),
        keys::TOKENS,
    );
    fails_on(
        &with(&g, keys::TOKENS, Some(Value::str("abc"))),
        keys::TOKENS,
    );
    fails_on(
        &with(&g, keys::TOKENS, Some(Value::i32s([1, 2]))),
        keys::TOKENS,
    );
    fails_on(
        &with(&g, keys::TOKEN_TYPE, Some(Value::i32s([1; 5]))),
        keys::TOKEN_TYPE,
    );
    fails_on(
        &with(&g, keys::TOKEN_TYPE, Some(Value::i32s([9; 263]))),
        keys::TOKEN_TYPE,
    );
    fails_on(
        &with(&g, keys::TOKEN_TYPE, Some(Value::strings(["1"; 263]))),
        keys::TOKEN_TYPE,
    );
    fails_on(&with(&g, keys::MERGES, None), keys::MERGES);
    fails_on(
        &with(&g, keys::MERGES, Some(Value::str("Ġ t"))),
        keys::MERGES,
    );
    let e = fails_on(
        &with(&g, keys::MERGES, Some(Value::strings(["Ġ t", "q xyz"]))),
        keys::MERGES,
    );
    assert!(e.to_string().contains("entry 1"), "{e}");
    fails_on(
        &with(&g, keys::MERGES, Some(Value::strings(["nospace"]))),
        keys::MERGES,
    );
    fails_on(
        &with(&g, keys::MERGES, Some(Value::strings(["a b"]))),
        keys::MERGES,
    );
    fails_on(
        &with(&g, keys::MERGES, Some(Value::strings(["Ġ "]))),
        keys::MERGES,
    );
    fails_on(
        &with(&g, keys::PRE, Some(Value::str("no-such-pre"))),
        keys::PRE,
    );
    fails_on(&with(&g, keys::PRE, Some(Value::I32(3))), keys::PRE);
    fails_on(&with(&g, keys::BOS_ID, Some(Value::U32(n))), keys::BOS_ID);
    fails_on(&with(&g, keys::EOS_ID, Some(Value::I32(-1))), keys::EOS_ID);
    fails_on(&with(&g, keys::EOS_ID, Some(Value::str("2"))), keys::EOS_ID);
    fails_on(
        &with(&g, keys::EOT_ID, Some(Value::U64(u64::MAX))),
        keys::EOT_ID,
    );
    fails_on(
        &with(&g, keys::PAD_ID, Some(Value::U32(1 << 20))),
        keys::PAD_ID,
    );
    fails_on(
        &with(&g, keys::ADD_BOS, Some(Value::str("true"))),
        keys::ADD_BOS,
    );
    fails_on(
        &with(&g, keys::ADD_BOS, Some(Value::Bool(true))),
        keys::ADD_BOS,
    );
    fails_on(&with(&g, keys::ADD_EOS, Some(Value::U8(1))), keys::ADD_EOS);
    fails_on(&with(&s, keys::SCORES, None), keys::SCORES);
    fails_on(
        &with(&s, keys::SCORES, Some(Value::f32s([0.0; 4]))),
        keys::SCORES,
    );
    fails_on(
        &with(&s, keys::ADD_SPACE_PREFIX, Some(Value::I32(0))),
        keys::ADD_SPACE_PREFIX,
    );
    // A byte-type token whose text is not <0xNN>.
    let mut types = vec![1i32; 263];
    types[65] = 6;
    fails_on(
        &with(&g, keys::TOKEN_TYPE, Some(Value::i32s(types))),
        keys::TOKENS,
    );
    // Nested arrays where strings belong.
    let nested = Value::Array(ValueType::Array, vec![Value::strings(["a"])]);
    fails_on(&with(&g, keys::TOKENS, Some(nested)), keys::TOKENS);
}

#[test]
fn eog_by_name_and_fim_keys() {
    let mut e = gpt2_entries();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| encode_bytes(&[b])).collect();
    tokens.extend(["<|im_end|>", "<|endoftext|>", "</s>", "<fim_pad>"].map(String::from));
    e = with(&e, keys::TOKENS, Some(Value::strings(&tokens)));
    // </s> is plain text here (type normal): it must not end generation.
    let mut types = vec![1i32; 260];
    types[256] = 3;
    types[257] = 3;
    types[259] = 3;
    e = with(&e, keys::TOKEN_TYPE, Some(Value::i32s(types)));
    e = with(&e, keys::MERGES, Some(Value::strings(Vec::<String>::new())));
    e = with(&e, keys::EOS_ID, None);
    e.push((keys::FIM_PAD_ID.into(), Value::U32(259)));
    let t = Tokenizer::from_gguf(&metadata(&e)).unwrap();
    assert_eq!(t.eog_ids(), &[256, 257, 259]);
    assert_eq!(t.eot_id(), Some(256));
    assert!(!t.is_eog(258));
}

#[test]
fn shared_across_threads() {
    fn check<T: Send + Sync>() {}
    check::<Tokenizer>();
    // Encoding from several threads at once gives the same ids.
    let t = gpt2();
    let want = t.encode(" the is this", false, false).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(t.encode(" the is this", false, false).unwrap(), want));
        }
    });
}
