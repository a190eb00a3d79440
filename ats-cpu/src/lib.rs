//! ats-cpu (being built).
