#![no_main]
//! libFuzzer target `size_and_options`: the body is `ats_tests::fuzz::targets::SizeAndOptions`,
//! shared with the stable smoke test `fuzz_size_and_options` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{SizeAndOptions, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<SizeAndOptions> = LazyLock::new(SizeAndOptions::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
