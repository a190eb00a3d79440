//! ats-sched (being built).
