//! `ats-cli`: run LLMs and VLMs on one machine inside a VRAM budget. The
//! code is the library's (`src/lib.rs`), so the fuzz targets and tests can
//! call the server's request handling without HTTP.

fn main() {
    ats_cli::main();
}
