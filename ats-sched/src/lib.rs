//! `ats-sched`: the ATS scheduler.
//!
//! The planning algorithms, over small abstract inputs: static placement of
//! resident weights ([`placement`]), the per-round dynamic transfer plan
//! ([`dynamic`]), token tiers ([`tiers`]) and the load-aware re-scheduling
//! trigger ([`rescheduler`]), with brute-force references ([`brute`]).

pub mod brute;
pub mod dynamic;
pub mod placement;
pub mod rescheduler;
pub mod tiers;
