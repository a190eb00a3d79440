#![no_main]
//! libFuzzer target `tokenizer`: the body is `ats_tests::fuzz::targets::TokenizerTarget`,
//! shared with the stable smoke test `fuzz_tokenizer` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{Target, TokenizerTarget};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<TokenizerTarget> = LazyLock::new(TokenizerTarget::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
