//! One module per subcommand.

pub mod bench;
pub mod chat;
pub mod devices;
pub mod eval;
pub mod inspect;
pub mod perplexity;
pub mod plan;
pub mod profile;
pub mod run;
pub mod synth;
pub mod vlm;
