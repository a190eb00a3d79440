//! ats-vision (being built).
