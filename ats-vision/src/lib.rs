//! ats-vision (being built).

pub mod preprocess;
