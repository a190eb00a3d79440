//! The tokenizer against references: the fixture tokenizer embedded in every
//! fixture GGUF (Hugging Face ids in `tokenizer/cases.json`), and SmolLM2.

mod support;

use std::sync::OnceLock;

use ats_core::gguf::GgufFile;
use ats_core::tokenizer::{PreTokenizerKind, TokenizerModel};
use ats_core::{TokenStream, Tokenizer, TokenizerError};
use proptest::prelude::*;

const MODEL_DIRS: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "qwen2_vl",
    "qwen2_5_vl",
];

/// The text-model GGUF of a fixture directory.
fn fixture_gguf(dir: &str) -> GgufFile {
    let d = support::fixtures().join(dir);
    let path = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".gguf") && !name.starts_with("mmproj")
        })
        .unwrap_or_else(|| panic!("no GGUF in {}", d.display()));
    GgufFile::open(&path).unwrap()
}

fn cases() -> serde_json::Value {
    let p = support::fixtures().join("tokenizer/cases.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn streamed(t: &Tokenizer, ids: &[u32]) -> String {
    let mut s = TokenStream::new(t);
    let mut out = String::new();
    for &id in ids {
        out.push_str(&s.push(id).unwrap());
    }
    assert!(!s.has_pending());
    out
}

#[test]
fn fixture_tokenizer_matches_hugging_face_in_every_gguf() {
    let cases = cases();
    let cases = cases["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 9);
    for dir in MODEL_DIRS {
        let f = fixture_gguf(dir);
        let t = Tokenizer::from_gguf(&f.metadata).unwrap();
        assert_eq!(
            t.model(),
            TokenizerModel::Gpt2 {
                pre: PreTokenizerKind::Qwen2
            }
        );
        assert_eq!(t.vocab_size(), 512);
        assert_eq!(
            (t.bos_id(), t.eos_id(), t.pad_id()),
            (None, Some(506), Some(504))
        );
        assert_eq!(t.eot_id(), Some(506));
        assert!(!t.add_bos() && !t.add_eos());
        // <|im_end|> (EOS) and <|endoftext|> end generation; the others do not.
        assert_eq!(t.eog_ids(), &[504, 506]);
        assert!(t.is_eog(506) && t.is_eog(504) && !t.is_eog(505) && !t.is_eog(0));
        assert_eq!(t.token_id("<|image_pad|>"), Some(510));
        assert!(t.notes().is_empty());

        for case in cases {
            let text = case["text"].as_str().unwrap();
            let want: Vec<u32> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let ids = t.encode(text, true, true).unwrap();
            assert_eq!(ids, want, "{dir}: {text:?}");
            let decoded = case["decoded"].as_str().unwrap();
            assert_eq!(t.decode(&ids).unwrap(), decoded, "{dir}: {text:?}");
            assert_eq!(streamed(&t, &ids), decoded, "{dir}: {text:?}");
        }
    }
}

#[test]
fn fixture_special_tokens_only_when_parsed() {
    let t = Tokenizer::from_gguf(&fixture_gguf("qwen2").metadata).unwrap();
    let text = "<|im_start|>user";
    let parsed = t.encode(text, false, true).unwrap();
    assert_eq!(parsed[0], 505);
    let plain = t.encode(text, false, false).unwrap();
    assert!(plain.iter().all(|&id| id < 504), "{plain:?}");
    assert_eq!(t.decode(&plain).unwrap(), text);
    assert_eq!(t.token_to_piece(505).unwrap(), b"<|im_start|>");
}

fn smollm2() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let path = support::smollm2()?;
        let f = GgufFile::open(&path).unwrap();
        Some(Tokenizer::from_gguf(&f.metadata).unwrap())
    })
    .as_ref()
}

#[test]
fn smollm2_known_ids() {
    let Some(t) = smollm2() else { return };
    assert_eq!(
        t.model(),
        TokenizerModel::Gpt2 {
            pre: PreTokenizerKind::SmolLm
        }
    );
    assert_eq!(t.vocab_size(), 49152);
    assert!(!t.add_bos());
    // add_bos_token is false in the file: no BOS even with add_special.
    assert_eq!(
        t.encode("The capital of France is", true, false).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    // Ids from Hugging Face `tokenizers` (0.23.3, Python) given this file's
    // vocabulary and merges with SmolLM2's pre-tokenizer (individual digits,
    // then byte-level with GPT-2's regex).
    let hf: &[(&str, &[u32])] = &[
        (
            "Hello world! I'm here, you're there; they've gone.",
            &[
                19556, 905, 17, 339, 5248, 1535, 28, 346, 2316, 665, 43, 502, 3543, 7270, 30,
            ],
        ),
        (
            "  leading spaces\n\nnew lines\ttabs  trailing  ",
            &[
                216, 2899, 5600, 198, 198, 2241, 3204, 197, 100, 7366, 216, 35079, 256,
            ],
        ),
        (
            "Numbers: 12345 3.14159 2024-06-01 and 1,000,000",
            &[
                39006, 42, 216, 33, 34, 35, 36, 37, 216, 35, 30, 33, 36, 33, 37, 41, 216, 34, 32,
                34, 36, 29, 32, 38, 29, 32, 33, 284, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32,
            ],
        ),
        (
            "Unicode: café naïve 日本語 🦙 ✅ e\u{301} Ελληνικά русский عربى",
            &[
                3706, 15817, 42, 37366, 15486, 46494, 17097, 241, 115, 40993, 179, 120, 248, 15107,
                116, 243, 4636, 246, 223, 297, 151, 219, 5664, 239, 17162, 17162, 25723, 11517,
                12001, 21118, 26112, 216, 9175, 14714, 9382, 39511, 7872, 24958, 45704, 20602,
                31462, 164, 227,
            ],
        ),
        (
            "def f(x):\n    return x ** 2  # square\r\n",
            &[
                1604, 275, 24, 104, 727, 472, 1003, 1792, 1903, 216, 34, 216, 907, 5222, 2738,
            ],
        ),
        (
            "don't   stop\r\nwindows line\u{a0}nbsp",
            &[
                12420, 982, 256, 2853, 201, 198, 37066, 1761, 15442, 94, 32093,
            ],
        ),
        (
            "I'VE 'RE 'S 's 'll 'LL",
            &[
                57, 23, 18525, 637, 3256, 637, 67, 637, 99, 637, 764, 637, 16421,
            ],
        ),
        (
            "👩\u{200d}👩\u{200d}👧 family, 🇫🇷 flag, ZWJ\u{200d}test",
            &[
                10813, 235, 119, 321, 231, 10813, 235, 119, 321, 231, 10813, 235, 117, 1564, 28,
                15107, 225, 121, 10813, 225, 132, 7048, 28, 1777, 71, 58, 321, 231, 2129,
            ],
        ),
    ];
    for (text, want) in hf {
        assert_eq!(&t.encode(text, false, true).unwrap(), want, "{text:?}");
        assert_eq!(&t.decode(want).unwrap(), text);
    }
    assert_eq!(
        (t.bos_id(), t.eos_id(), t.eot_id()),
        (Some(1), Some(2), Some(2))
    );
    assert_eq!(t.eog_ids(), &[0, 2]);
    let ids = t
        .encode("<|im_start|>user\nHi<|im_end|>\n", false, true)
        .unwrap();
    assert_eq!(ids[0], 1);
    assert_eq!(ids[ids.len() - 2], 2);
    assert_eq!(t.token_text(ids[ids.len() - 1]), Some("Ċ"));
    // The bytes it cannot spell, and what that means for text that has them.
    let missing: Vec<u8> = (0..=255u8).filter(|&b| t.byte_token(b).is_none()).collect();
    assert_eq!(
        missing,
        [
            0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5, 0xf6, 0xf7, 0xf8,
            0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff
        ]
    );
    assert!(matches!(
        t.encode("a\u{4}b", false, false),
        Err(TokenizerError::Unrepresentable { snippet }) if snippet == "\u{4}"
    ));
    // SmolLM splits digits one by one.
    let digits = t.encode("12345", false, false).unwrap();
    assert_eq!(digits.len(), 5);
    assert_eq!(t.decode(&digits).unwrap(), "12345");
}

/// Text that exercises the pre-tokenizer: any characters, plus runs of the
/// cases tokenizers get wrong (combining marks, emoji, CJK, CRLF, tabs,
/// spaces, digits, contractions).
fn tricky_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        any::<char>().prop_map(String::from),
        "[a-zA-Z]{1,8}",
        "[0-9]{1,7}",
        " {1,6}",
        "[\t\r\n]{1,3}",
        Just("\r\n".to_string()),
        "[\u{0300}-\u{036f}]{1,3}",
        "[\u{4e00}-\u{9fff}]{1,4}",
        "[\u{1f300}-\u{1f64f}\u{1f980}-\u{1f9ff}]{1,3}",
        Just("👩‍👩‍👧".to_string()),
        Just("'s".to_string()),
        Just("'LL".to_string()),
        Just("<|im_start|>".to_string()),
        "[!-/:-@]{1,3}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn smollm2_round_trips_any_text(text in tricky_text()) {
        let Some(t) = smollm2() else { return Ok(()) };
        // SmolLM2 has no tokens for a few bytes (0x04, 0x06, 0x13, 0x14, 0x16,
        // 0x1d, 0xf1, 0xf2, and bytes never in UTF-8): text with them is an error.
        if !text.bytes().all(|b| t.byte_token(b).is_some()) {
            let err = t.encode(&text, false, false).unwrap_err();
            prop_assert!(matches!(err, TokenizerError::Unrepresentable { .. }), "{}", err);
            return Ok(());
        }
        let ids = t.encode(&text, false, false).unwrap();
        prop_assert_eq!(&t.decode(&ids).unwrap(), &text);
        prop_assert_eq!(&streamed(t, &ids), &text);
        // Parsing special tokens changes ids, never the text.
        let ids = t.encode(&text, false, true).unwrap();
        prop_assert_eq!(&t.decode(&ids).unwrap(), &text);
    }

    #[test]
    fn fixture_round_trips_any_text(text in tricky_text()) {
        static T: OnceLock<Tokenizer> = OnceLock::new();
        let t = T.get_or_init(|| Tokenizer::from_gguf(&fixture_gguf("qwen2").metadata).unwrap());
        let ids = t.encode(&text, false, true).unwrap();
        prop_assert_eq!(&t.decode(&ids).unwrap(), &text);
        prop_assert_eq!(&streamed(t, &ids), &text);
    }
}
