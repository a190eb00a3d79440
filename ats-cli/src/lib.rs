//! `ats-cli` as a library: the binary's code, private, behind two entry
//! points. [`main`] is the whole binary (`src/main.rs` only calls it);
//! [`requests`] runs the server's request handling on a body's bytes
//! without HTTP or an engine, for the fuzz targets (`fuzz/`,
//! `ats_tests::fuzz`) and tests.

mod answer;
mod args;
mod cli;
mod cmd;
mod hold;
mod load;
mod logging;
mod progress;
mod report;
mod serve;
mod usage;
mod vision;

pub use cli::main;
pub use serve::check as requests;
