#![no_main]
//! libFuzzer target `image_preprocess`: the body is `ats_tests::fuzz::targets::ImagePreprocess`,
//! shared with the stable smoke test `fuzz_image_preprocess` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{ImagePreprocess, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<ImagePreprocess> = LazyLock::new(ImagePreprocess::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
