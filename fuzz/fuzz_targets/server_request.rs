#![no_main]
//! libFuzzer target `server_request`: the body is `ats_tests::fuzz::targets::ServerRequest`,
//! shared with the stable smoke test `fuzz_server_request` in `tests/tests/fuzz.rs`.

use std::sync::LazyLock;

use ats_tests::fuzz::targets::{ServerRequest, Target};
use libfuzzer_sys::fuzz_target;

static TARGET: LazyLock<ServerRequest> = LazyLock::new(ServerRequest::new);

fuzz_target!(|data: &[u8]| {
    let _ = TARGET.run(data);
});
