//! `ats-sched`: scheduling weight tensors between CPU and GPU.
//!
//! The planning algorithms, over small abstract inputs: static placement of
//! resident weights ([`placement`]), the per-round dynamic transfer plan
//! ([`dynamic`]), token tiers ([`tiers`]) and the load-aware re-scheduling
//! trigger ([`rescheduler`]), with brute-force references ([`brute`]). The
//! executor runs a placement across devices ([`exec`]).

pub mod brute;
pub mod config;
pub mod dynamic;
pub mod exec;
pub mod placement;
pub mod planner;
pub mod profile;
pub mod rescheduler;
pub mod scheduler;
pub mod session;
pub mod sim;
pub mod size;
pub mod tiers;
