//! ats-cuda (being built).
