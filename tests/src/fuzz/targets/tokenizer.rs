//! The fuzz target `tokenizer`: text and token ids through the llama
//! fixture's byte-level BPE, whole and streamed.

use ats_core::tokenizer::Tokenizer;

use super::{Target, err, llama_tokenizer, words};
use crate::fixtures;

/// Arbitrary bytes as (lossy) text through encode, and as token ids (in and
/// out of range) through decode and the streaming detokenizer. Text without
/// special tokens must round-trip exactly (byte-level BPE loses nothing).
/// The first byte picks the mode.
pub struct TokenizerTarget {
    tok: Tokenizer,
}

impl Target for TokenizerTarget {
    const NAME: &'static str = "tokenizer";
    const MAX_LEN: usize = 4096;

    fn new() -> Self {
        TokenizerTarget {
            tok: llama_tokenizer(),
        }
    }

    fn seeds() -> Vec<Vec<u8>> {
        let cases: serde_json::Value = serde_json::from_slice(
            &std::fs::read(fixtures().join("tokenizer/cases.json")).unwrap(),
        )
        .unwrap();
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        let mut collect = |v: &serde_json::Value| {
            if let Some(s) = v.get("text").and_then(|t| t.as_str()) {
                seeds.push([&[0u8][..], s.as_bytes()].concat());
            }
        };
        match &cases {
            serde_json::Value::Array(a) => a.iter().for_each(&mut collect),
            serde_json::Value::Object(o) => o
                .values()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .for_each(|v| collect(&v)),
            _ => {}
        }
        seeds.push(b"\x00Hello, world! It's 2024.\n\tTabs   and  spaces".to_vec());
        seeds.push("\x01<|im_start|>user\nhi<|im_end|>\n<|endoftext|>".into());
        seeds
            .push(b"\x02\x00\x00\x00\x00\x01\x00\x00\x00\xff\xff\xff\xff\x00\x02\x00\x00".to_vec());
        seeds.push(b"\x03\xf0\x9f\xa6\x80\xe2\x82\xac\xc3\xa9\xff\xfe\x80".to_vec());
        seeds
    }

    fn dict() -> Vec<Vec<u8>> {
        words(&[
            "<|im_start|>",
            "<|im_end|>",
            "<|endoftext|>",
            "<|",
            "|>",
            "🦀",
            "\u{301}",
            "\u{200d}",
            "\u{fffd}",
            "\r\n",
            "   ",
            "'s",
            "1234567",
        ])
    }

    fn run(&self, b: &[u8]) -> Result<String, String> {
        let tok = &self.tok;
        let n = tok.vocab_size() as u32;
        let (mode, rest) = b.split_first().ok_or("empty")?;
        match mode % 4 {
            0 | 1 => {
                let text = String::from_utf8_lossy(rest);
                let parse_special = mode % 4 == 1;
                let ids = tok
                    .encode(&text, mode & 4 != 0, parse_special)
                    .map_err(err)?;
                assert!(ids.iter().all(|&id| id < n));
                let back = tok.decode(&ids).map_err(err)?;
                if !parse_special && mode & 4 == 0 {
                    assert_eq!(back, text, "round trip of {ids:?}");
                }
                Ok(format!("{} ids", ids.len().min(4)))
            }
            _ => {
                // ids: u32 LE words, folded near the vocabulary when mode says so
                let ids: Vec<u32> = rest
                    .chunks(4)
                    .map(|c| {
                        let mut w = [0u8; 4];
                        w[..c.len()].copy_from_slice(c);
                        let id = u32::from_le_bytes(w);
                        if mode % 4 == 2 { id % (n + 8) } else { id }
                    })
                    .collect();
                let mut stream = tok.stream();
                let mut ok = true;
                for &id in &ids {
                    if stream.push(id).is_err() {
                        ok = false;
                        break;
                    }
                    let _ = tok.token_to_piece(id);
                }
                if ok {
                    // only the start of one unfinished character is held back
                    assert!(stream.finish() < 4, "held back more than a character");
                }
                let whole = tok.decode(&ids);
                assert_eq!(ok, whole.is_ok(), "stream and decode agree on {ids:?}");
                whole.map(|_| String::new()).map_err(err)
            }
        }
    }
}
