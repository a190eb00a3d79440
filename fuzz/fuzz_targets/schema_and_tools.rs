#![no_main]
//! libFuzzer target `schema_and_tools`: the body is `ats_tests::fuzz::targets::SchemaAndTools`,
//! shared with the stable smoke test `fuzz_schema_and_tools` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{SchemaAndTools, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<SchemaAndTools> = LazyLock::new(SchemaAndTools::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
