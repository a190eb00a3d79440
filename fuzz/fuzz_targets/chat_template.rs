#![no_main]
//! libFuzzer target `chat_template`: the body is `ats_tests::fuzz::targets::ChatTemplateTarget`,
//! shared with the stable smoke test `fuzz_chat_template` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{ChatTemplateTarget, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<ChatTemplateTarget> = LazyLock::new(ChatTemplateTarget::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
