#![no_main]
//! libFuzzer target `gguf`: the body is `ats_tests::fuzz::targets::Gguf`,
//! shared with the stable smoke test `fuzz_gguf` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{Gguf, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<Gguf> = LazyLock::new(Gguf::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
