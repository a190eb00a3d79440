//! The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata,
//! built on the `tokenizers` crate's BPE model and pre-tokenizers.
//!
//! Two families, as llama.cpp names them in `tokenizer.ggml.model`:
//! - `gpt2`: byte-level BPE from `tokenizer.ggml.tokens` and
//!   `tokenizer.ggml.merges`, words cut by the regexes that
//!   `tokenizer.ggml.pre` names (see [`PreTokenizerKind`]);
//! - `llama`: SentencePiece BPE from the tokens and `tokenizer.ggml.scores`,
//!   spaces spelt `▁`, a leading space added, and characters without a token
//!   spelt as `<0xNN>` byte tokens.
//!
//! Behaviour follows llama.cpp where it and Hugging Face differ in ways the
//! GGUF cannot express: no Unicode normalisation is applied (Qwen2's NFC is
//! not recorded in the file), and decoding does not "clean up" spaces, so
//! `decode(encode(s)) == s` for every string.

mod byte_level;
mod error;
mod guard;
pub mod keys;
mod model;
mod pretok;
mod special;
mod stream;
mod vocab;

#[cfg(test)]
pub(crate) mod tests;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::tokenizer::{
    Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
};

pub use error::TokenizerError;
pub use guard::{GuardedText, Guards};
pub use pretok::PreTokenizerKind;
pub use stream::TokenStream;
pub use vocab::TokenType;

use crate::gguf::Metadata;
use special::Fragment;
use vocab::{Vocab, opt_bool, opt_id, opt_str, string_array};

/// SentencePiece's visible space.
const SPM_SPACE: &str = "\u{2581}";

/// Token texts that end generation wherever they occur (llama.cpp decides
/// end-of-generation by these names too, as GGUF lists only EOS/EOT/EOM ids).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "</s>",
    "<|return|>",
    "<|call|>",
    // GLM-4: a tool call ends the turn where the tool's answer follows
    "<|observation|>",
];

/// End-of-turn candidates when `tokenizer.ggml.eot_token_id` is absent,
/// most specific first.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "<end_of_utterance>",
];

/// The tokenizer family of a GGUF vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerModel {
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`).
    Gpt2 {
        /// The pre-tokenizer chosen by `tokenizer.ggml.pre`.
        pre: PreTokenizerKind,
    },
    /// SentencePiece BPE (`tokenizer.ggml.model = "llama"`).
    Llama,
}

/// A tokenizer built from GGUF metadata: text to token ids and back.
#[derive(Clone)]
pub struct Tokenizer {
    model_kind: TokenizerModel,
    vocab: Vocab,
    bpe: BPE,
    /// Shared: compiled once per process and kind ([`PreTokenizerKind::shared`]).
    pre: Option<Arc<PreTokenizerWrapper>>,
    /// Decoded bytes of every token, concatenated; `piece_ends[i]` ends token i.
    pieces: Vec<u8>,
    piece_ends: Vec<usize>,
    /// The most input bytes one token can stand for (see [`Tokenizer::min_tokens`]).
    max_token_bytes: usize,
    specials: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    eot: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    eog: Vec<u32>,
    notes: Vec<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model_kind)
            .field("vocab_size", &self.vocab.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("eot", &self.eot)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("eog", &self.eog)
            .finish()
    }
}

impl Tokenizer {
    /// Builds the tokenizer from a GGUF file's metadata. Every problem in the
    /// metadata is an error naming the key.
    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let model_name =
            opt_str(md, keys::MODEL)?.ok_or(TokenizerError::MissingKey { key: keys::MODEL })?;
        let vocab = Vocab::from_metadata(md)?;
        let n = vocab.len();
        let mut notes = Vec::new();

        let unk_meta = opt_id(md, keys::UNK_ID, n)?;
        let fam = match model_name {
            "gpt2" => Family::gpt2(md, &vocab, unk_meta, &mut notes)?,
            "llama" => Family::llama(md, &vocab, unk_meta)?,
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };
        let (model_kind, bpe, pre, add_space_prefix, unk) =
            (fam.kind, fam.bpe, fam.pre, fam.add_space_prefix, fam.unk);

        let bos = opt_id(md, keys::BOS_ID, n)?.or(fam.default_bos);
        let eos = opt_id(md, keys::EOS_ID, n)?.or(fam.default_eos);
        let eom = opt_id(md, keys::EOM_ID, n)?;
        let pad = opt_id(md, keys::PAD_ID, n)?;
        // Not used, but a broken value is still a broken file.
        opt_id(md, keys::SEP_ID, n)?;
        let mut eot = match opt_id(md, keys::EOT_ID, n)? {
            Some(id) => Some(id),
            None => EOT_TEXTS
                .iter()
                .find_map(|t| vocab.by_text.get(*t).copied()),
        };
        let add_bos = opt_bool(md, keys::ADD_BOS)?.unwrap_or(fam.default_add_bos);
        let add_eos = opt_bool(md, keys::ADD_EOS)?.unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(TokenizerError::bad(
                keys::ADD_BOS,
                format!("is true but {} is absent", keys::BOS_ID),
            ));
        }
        if add_eos && eos.is_none() {
            return Err(TokenizerError::bad(
                keys::ADD_EOS,
                format!("is true but {} is absent", keys::EOS_ID),
            ));
        }

        let mut eog: BTreeSet<u32> = [eos, eot, eom].into_iter().flatten().collect();
        for key in [keys::FIM_PAD_ID, keys::FIM_REP_ID, keys::FIM_SEP_ID] {
            eog.extend(opt_id(md, key, n)?);
        }
        for (i, t) in vocab.tokens.iter().enumerate() {
            // `</s>` ends generation only where it is a special token, not text.
            if EOG_TEXTS.contains(&t.as_str())
                && !(t == "</s>" && vocab.types[i] == vocab::TokenType::Normal)
            {
                eog.insert(i as u32);
            }
        }

        // harmony (gpt-oss): `<|end|>` closes a message inside the reply
        // (the analysis before the final answer); the reply itself ends at
        // `<|return|>` or `<|call|>`
        let harmony = ["<|return|>", "<|call|>"]
            .iter()
            .all(|t| vocab.by_text.get(*t).is_some_and(|id| eog.contains(id)));
        if harmony && let Some(end) = vocab.by_text.get("<|end|>") {
            eog.remove(end);
            if eot == Some(*end) {
                eot = eos;
            }
        }

        let (pieces, piece_ends) = decode_table(&vocab, model_kind)?;
        let max_token_bytes = max_token_bytes(&piece_ends);
        let specials = special::special_ids(&vocab);
        Ok(Tokenizer {
            model_kind,
            vocab,
            bpe,
            pre,
            pieces,
            piece_ends,
            max_token_bytes,
            specials,
            bos,
            eos,
            eot,
            pad,
            unk,
            add_bos,
            add_eos,
            add_space_prefix,
            eog: eog.into_iter().collect(),
            notes,
        })
    }

    /// Text to token ids. `add_special` adds BOS/EOS as the metadata asks
    /// (`tokenizer.ggml.add_bos_token`, `add_eos_token`); `parse_special`
    /// turns the text of control tokens (`<|im_start|>`) into those tokens.
    /// User-defined tokens are always matched whole.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_bounded(text, add_special, parse_special, usize::MAX)
    }

    /// [`Tokenizer::encode`] that gives up with
    /// [`TokenizerError::TooManyTokens`] once the text is certain to need
    /// more than `max_tokens`: at once when its length alone says so
    /// ([`Tokenizer::min_tokens`]), else as soon as that many are made.
    pub fn encode_bounded(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        max_tokens: usize,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.check_bytes(text.len(), max_tokens)?;
        let frags = special::partition(text, &self.specials, &self.vocab, parse_special);
        self.encode_pieces(frags.into_iter().map(Piece::from), add_special, max_tokens)
    }

    /// `text` with every control-token text in it wrapped in `guards`, so
    /// that [`Tokenizer::encode_guarded`] reads it as plain text whatever
    /// surrounds it. Chat message content goes through this before the
    /// template renders it (see [`crate::chat::ChatTemplate::render_guarded`]).
    pub fn guard(&self, text: &str, guards: Guards) -> String {
        let mut out = String::with_capacity(text.len());
        for frag in special::partition(text, &self.specials, &self.vocab, true) {
            match frag {
                Fragment::Text(s) => out.push_str(s),
                Fragment::Token(id) => {
                    let t = &self.vocab.tokens[id as usize];
                    // user-defined tokens are matched in plain text too
                    if self.vocab.types[id as usize] == TokenType::UserDefined {
                        out.push_str(t);
                    } else {
                        out.push(guards.open());
                        out.push_str(t);
                        out.push(guards.close());
                    }
                }
            }
        }
        out
    }

    /// Token ids of text made with [`Tokenizer::guard`]: control tokens are
    /// parsed outside guarded spans only, the guards themselves vanish, and
    /// text on both sides of a guarded span is one piece of text (so the
    /// ids equal those of the unguarded text wherever no span was guarded).
    /// Bounded like [`Tokenizer::encode_bounded`].
    pub fn encode_guarded(
        &self,
        text: &str,
        guards: Guards,
        add_special: bool,
        max_tokens: usize,
    ) -> Result<Vec<u32>, TokenizerError> {
        let spans = guards.split(text)?;
        self.check_bytes(spans.iter().map(|s| s.0.len()).sum(), max_tokens)?;
        let mut pieces: Vec<Piece<'_>> = Vec::new();
        for (span, guarded) in spans {
            for frag in special::partition(span, &self.specials, &self.vocab, !guarded) {
                match (pieces.last_mut(), Piece::from(frag)) {
                    (Some(Piece::Text(prev)), Piece::Text(next)) => prev.to_mut().push_str(&next),
                    (_, p) => pieces.push(p),
                }
            }
        }
        self.encode_pieces(pieces, add_special, max_tokens)
    }

    /// The fewest tokens `bytes` bytes of text can take: no token stands
    /// for more input bytes than the longest piece in the vocabulary (or 4,
    /// one character under an unknown token).
    pub fn min_tokens(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.max_token_bytes)
    }

    /// The most input bytes a token can stand for.
    pub fn max_token_bytes(&self) -> usize {
        self.max_token_bytes
    }

    fn check_bytes(&self, bytes: usize, max_tokens: usize) -> Result<(), TokenizerError> {
        let at_least = self.min_tokens(bytes);
        if at_least > max_tokens {
            return Err(TokenizerError::TooManyTokens {
                limit: max_tokens,
                at_least,
            });
        }
        Ok(())
    }

    fn encode_pieces<'s>(
        &self,
        pieces: impl IntoIterator<Item = Piece<'s>>,
        add_special: bool,
        max_tokens: usize,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        // SentencePiece adds its leading space at the start and after each
        // special token, as llama.cpp does.
        let mut after_special = true;
        for piece in pieces {
            match piece {
                Piece::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Piece::Text(s) => {
                    self.encode_text(&s, after_special, max_tokens, &mut out)?;
                    after_special = false;
                }
            }
            too_many(&out, max_tokens)?;
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        too_many(&out, max_tokens)?;
        Ok(out)
    }

    fn encode_text(
        &self,
        s: &str,
        after_special: bool,
        max_tokens: usize,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let backend = |e: tokenizers::Error| TokenizerError::Backend(e.to_string());
        match &self.pre {
            Some(pre) => {
                let mut pts = PreTokenizedString::from(s);
                pre.pre_tokenize(&mut pts).map_err(backend)?;
                for (word, _, _) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte) {
                    self.encode_word(word, out, |w| {
                        String::from_utf8_lossy(&byte_level::decode_token(w)).into_owned()
                    })?;
                    too_many(out, max_tokens)?;
                }
            }
            None => {
                let mut text = String::with_capacity(s.len() + SPM_SPACE.len());
                if self.add_space_prefix && after_special {
                    text.push(' ');
                }
                text.push_str(s);
                let escaped = text.replace(' ', SPM_SPACE);
                self.encode_word(&escaped, out, |w| w.replace(SPM_SPACE, " "))?;
            }
        }
        Ok(())
    }

    /// One pre-tokenized word through BPE. A character that neither a token
    /// nor byte fallback nor an unknown token can spell is an error, not a
    /// silent gap (the `tokenizers` BPE would skip it).
    fn encode_word(
        &self,
        word: &str,
        out: &mut Vec<u32>,
        readable: impl Fn(&str) -> String,
    ) -> Result<(), TokenizerError> {
        if word.is_empty() {
            return Ok(());
        }
        let toks = self
            .bpe
            .tokenize(word)
            .map_err(|e| TokenizerError::Backend(e.to_string()))?;
        if toks.last().map(|t| t.offsets.1) != Some(word.len()) {
            return Err(TokenizerError::Unrepresentable {
                snippet: readable(word),
            });
        }
        out.extend(toks.iter().map(|t| t.id));
        Ok(())
    }

    /// Token ids to text, special tokens shown as their text. Byte sequences
    /// that are not valid UTF-8 become U+FFFD. For SentencePiece vocabularies
    /// the space added in front of the text by [`Tokenizer::encode`] is removed.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.token_to_piece(id)?;
            let strip = i == 0 && self.add_space_prefix && piece.first() == Some(&b' ');
            bytes.extend_from_slice(if strip { &piece[1..] } else { piece });
        }
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// The bytes a token stands for (its text for special tokens). A piece
    /// may be part of a UTF-8 character; see [`TokenStream`].
    pub fn token_to_piece(&self, id: u32) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        if i >= self.piece_ends.len() {
            return Err(TokenizerError::BadTokenId {
                id,
                vocab_size: self.vocab_size(),
            });
        }
        let start = if i == 0 { 0 } else { self.piece_ends[i - 1] };
        Ok(&self.pieces[start..self.piece_ends[i]])
    }

    /// The token that spells one raw byte: the byte-level character for
    /// `gpt2` vocabularies, `<0xNN>` for `llama` ones. Text containing a
    /// byte without one can be encoded only through an unknown token.
    pub fn byte_token(&self, byte: u8) -> Option<u32> {
        let text = match self.model_kind {
            TokenizerModel::Gpt2 { .. } => byte_level::encode_bytes(&[byte]),
            TokenizerModel::Llama => format!("<0x{byte:02X}>"),
        };
        self.vocab.by_text.get(&text).copied()
    }

    /// A streaming detokenizer over this tokenizer.
    pub fn stream(&self) -> TokenStream<'_> {
        TokenStream::new(self)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The tokenizer family and pre-tokenizer.
    pub fn model(&self) -> TokenizerModel {
        self.model_kind
    }

    /// The beginning-of-sequence token.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The end-of-turn token (from metadata, else found by its text).
    pub fn eot_id(&self) -> Option<u32> {
        self.eot
    }

    /// The padding token.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// The unknown token.
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Every token that ends generation, ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether a token ends generation.
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// The id of a token by its exact text (the first id if repeated).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.by_text.get(text).copied()
    }

    /// A token's stored text (`Ġthe`, `▁the`, `<|im_end|>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(String::as_str)
    }

    /// A token's type.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.vocab.types.get(id as usize).copied()
    }

    /// One-line notices about choices made for this file (a missing
    /// pre-tokenizer name, ...), for the caller to show the user.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// What differs between the `gpt2` and `llama` families.
struct Family {
    kind: TokenizerModel,
    bpe: BPE,
    pre: Option<Arc<PreTokenizerWrapper>>,
    default_add_bos: bool,
    add_space_prefix: bool,
    unk: Option<u32>,
    default_bos: Option<u32>,
    default_eos: Option<u32>,
}

impl Family {
    fn gpt2(
        md: &Metadata,
        vocab: &Vocab,
        unk: Option<u32>,
        notes: &mut Vec<String>,
    ) -> Result<Family, TokenizerError> {
        let pre_name = match opt_str(md, keys::PRE)? {
            Some(p) => p,
            None => {
                notes.push(format!(
                    "{} is absent: using llama.cpp's default pre-tokenizer; \
                     tokenization may differ from the model's own",
                    keys::PRE
                ));
                "default"
            }
        };
        let spec = pretok::resolve(pre_name)?;
        let merges = string_array(md, keys::MERGES)?
            .ok_or(TokenizerError::MissingKey { key: keys::MERGES })?;
        Ok(Family {
            kind: TokenizerModel::Gpt2 { pre: spec.kind },
            bpe: model::gpt2(vocab, &merges, unk, spec.ignore_merges)?,
            pre: Some(spec.kind.shared()?),
            default_add_bos: spec.default_add_bos,
            add_space_prefix: false,
            unk,
            default_bos: None,
            default_eos: None,
        })
    }

    fn llama(md: &Metadata, vocab: &Vocab, unk: Option<u32>) -> Result<Family, TokenizerError> {
        let scores = vocab
            .scores
            .as_deref()
            .ok_or(TokenizerError::MissingKey { key: keys::SCORES })?;
        // SentencePiece's conventional ids: <unk>=0, <s>=1, </s>=2.
        let in_range = |id: u32| ((id as usize) < vocab.len()).then_some(id);
        let unk = unk.or(in_range(0));
        Ok(Family {
            kind: TokenizerModel::Llama,
            bpe: model::spm(vocab, scores, unk)?,
            pre: None,
            default_add_bos: true,
            add_space_prefix: opt_bool(md, keys::ADD_SPACE_PREFIX)?.unwrap_or(true),
            unk,
            default_bos: in_range(1),
            default_eos: in_range(2),
        })
    }
}

/// The decoded bytes of every token, concatenated, with end offsets.
fn decode_table(
    vocab: &Vocab,
    kind: TokenizerModel,
) -> Result<(Vec<u8>, Vec<usize>), TokenizerError> {
    let mut pieces = Vec::new();
    let mut ends = Vec::with_capacity(vocab.len());
    for (i, text) in vocab.tokens.iter().enumerate() {
        match vocab.types[i] {
            TokenType::Byte => {
                let b = parse_byte_token(text).ok_or_else(|| {
                    TokenizerError::bad(
                        keys::TOKENS,
                        format!("token {i} {text:?} has the byte type but is not <0xNN>"),
                    )
                })?;
                pieces.push(b);
            }
            t if t.is_special() => pieces.extend_from_slice(text.as_bytes()),
            _ => match kind {
                TokenizerModel::Gpt2 { .. } => pieces.extend(byte_level::decode_token(text)),
                TokenizerModel::Llama => {
                    pieces.extend_from_slice(text.replace(SPM_SPACE, " ").as_bytes())
                }
            },
        }
        ends.push(pieces.len());
    }
    Ok((pieces, ends))
}

/// A piece of input to encode: text (owned where pieces were joined) or a
/// special token.
enum Piece<'a> {
    Text(Cow<'a, str>),
    Token(u32),
}

impl<'a> From<Fragment<'a>> for Piece<'a> {
    fn from(f: Fragment<'a>) -> Self {
        match f {
            Fragment::Text(s) => Piece::Text(Cow::Borrowed(s)),
            Fragment::Token(id) => Piece::Token(id),
        }
    }
}

/// [`TokenizerError::TooManyTokens`] once `out` holds more than `max` ids.
fn too_many(out: &[u32], max: usize) -> Result<(), TokenizerError> {
    if out.len() > max {
        return Err(TokenizerError::TooManyTokens {
            limit: max,
            at_least: out.len(),
        });
    }
    Ok(())
}

/// The longest decoded piece, at least 4 bytes (an unknown token stands
/// for one character, up to 4 bytes, whatever its own text).
fn max_token_bytes(piece_ends: &[usize]) -> usize {
    let mut prev = 0;
    let mut longest = 4;
    for &end in piece_ends {
        longest = longest.max(end - prev);
        prev = end;
    }
    longest
}

/// The byte of a `<0xNN>` token.
fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
